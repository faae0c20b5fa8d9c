"""Admission end to end, through a real kube-apiserver: the program's objects as declared, with
OPA's pods run by a real kube-controller-manager from the declared Deployment and started as real
OPA processes by a kubelet of this suite (kubelet.py), which loads the policy from the declared
ConfigMaps exactly as a pod mounts them; the API server calls the declared webhooks at the
Service's ready endpoints. The package's modules share that control plane and its OPA pods
(conftest.py), set up once for them all and stopped after the last; each test leaves the policy
as the example stack declares it, in enforce mode, with every OPA pod serving."""

import pytest

# The asserts of the helpers the modules share (refusal's) report what failed as a test's do.
pytest.register_assert_rewrite("admission.opa")
