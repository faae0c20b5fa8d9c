"""The platform's components: a package per concern (gpu_nodes, gpu_operator, binpack_scheduler,
opa_admission, monitoring, gpu_compaction, teams), each with its settings section, inputs,
generated args, manifest builders and component; base below them all; platform, which reads
the stack's settings and wires the components together; package, the registry Pulumi serves.
docs/concepts/architecture.md#layout draws it."""
