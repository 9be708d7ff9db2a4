"""The evaluation proper: datasets, configurations, metrics, the runner, reports, safety probes, nightly."""
