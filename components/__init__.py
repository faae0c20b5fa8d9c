"""The platform's components: a package per concern, each registered with one line in
registry.py; base below them all; platform, which reads the stack's settings and wires the
components together; preview, which reads the stack's cluster before anything is declared;
program, which runs a stack; package, the registry Pulumi serves.
docs/concepts/architecture.md#layout lists them."""
