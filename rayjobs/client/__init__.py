"""The laptop's one way to a cluster: the dashboard client (the only module that talks to Ray's
Jobs SDK), the log stream over the dashboard's HTTP log API, and the embedded local head."""
