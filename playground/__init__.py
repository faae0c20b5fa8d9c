"""The playground: the platform of a stack on this machine, without a GPU cluster.

A real API server, OPA with the rendered policy behind the rendered webhooks, the binpack
scheduler (a real kube-scheduler with the rendered profile), Kueue with the generated
configuration when teams are on, and simulated GPU nodes; no container runs
(docs/users/playground.md)."""
