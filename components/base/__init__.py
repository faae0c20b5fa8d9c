"""What every component of the platform stands on: the component base class and the declaring
of manifests, the manifest pieces they share, validation and its errors, the settings types
several components take, the facts of the domain they share, and Helm releases. Nothing here
imports a component."""
