"""The provision plane: SkyPilot brings the cluster up and down; the SSH tunnel reaches its Jobs API."""
