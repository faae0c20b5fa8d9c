"""The platform's components: a package per concern (gpu_nodes, gpu_operator, binpack_scheduler,
opa_admission, monitoring, gpu_compaction, teams, gpu_reclaim), each with its settings section,
inputs, generated args, manifest builders and component; base below them all; platform, which
reads the stack's settings and wires the components together; preview, which reads the stack's
cluster before anything is declared; program, which runs a stack; package, the registry Pulumi
serves. docs/concepts/architecture.md#layout draws it."""
