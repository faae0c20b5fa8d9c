"""What a preview reads of the stack's cluster before anything is declared, apart from the
composition of the platform: the cluster itself (cluster.py: reachable, its version), what it
runs where the platform would install its own (conflicts.py: each conflict with its evidence and
fix), the stacks the platform joins instead of installing (existing_stacks.py: monitoring,
Kueue; each the reads it makes and pure checks of what they found), the frameworks' CRDs
(framework_crds.py), showback's price keys against the nodes' GPU models (prices.py), and the
identity a pull-request preview runs as, made from what the stack
declares and these reads (access.py)."""
