"""The showback report: each team's (or namespace's) GPU-hours allocated, used and idle over a
month or any range, and their cost, read from the platform's Prometheus with the dashboard's own
queries (components/monitoring/usage.py), written as a table, CSV or JSON
(docs/operators/monitoring.md#a-showback-report)."""
