"""Runtime helpers every process uses: the Temporal connection and telemetry."""
