"""The gateway: the HTTP control plane (FastAPI) — start, list, inspect and stop training
runs, list task sets. Runs live in Redis (etude.common.runs), so any number of gateways can
serve the same cluster."""
