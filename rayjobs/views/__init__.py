"""What the laptop shows of jobs: parsing verl's logs and metrics files, rows for list/status, the
tail panel, following a job, curves, the cluster view."""
