"""A setting is validated once on its way from the stack file to the cluster: `pulumi up` reads
the stack's config into settings once (every rule of every section and across sections, the
kubeconfig, the extra chart values), and GpuPlatform hands each component inputs already valid.
A component validates args itself only when a program declares it alone."""

import sys
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from components.base import charts, validation
from components.opa_admission.settings import AdmissionSettings
from components.platform import kubeconfig
from tests.kit import harness
from tests.kit.stacks import with_changes

SCHEDULER = "packer-under-test"
WEBHOOK = "gpu-once.under-test.example.com"


@contextmanager
def calls_of(*functions: Callable) -> Iterator[Counter]:
    """How often each function runs (by name, with the first of its arguments that is a
    string), however it is called: pydantic calls validators from compiled code."""
    codes = {function.__code__: function.__name__ for function in functions}
    seen: Counter = Counter()

    def profile(frame, event, _arg):
        if event == "call" and frame.f_code in codes:
            arguments = [frame.f_locals.get(name)
                         for name in frame.f_code.co_varnames[:frame.f_code.co_argcount]]
            value = next((a for a in arguments if isinstance(a, str)), None)
            seen[(codes[frame.f_code], value)] += 1

    sys.setprofile(profile)
    threading.setprofile(profile)
    try:
        yield seen
    finally:
        sys.setprofile(None)
        threading.setprofile(None)  # type: ignore[arg-type]


def test_pulumi_up_validates_each_setting_once():
    config = harness.stack_file_config(with_changes(
        scheduler={"name": SCHEDULER}, admission={"webhookName": WEBHOOK}))
    webhook_rule = vars(AdmissionSettings)["webhook_name_is_qualified"].__func__
    with calls_of(validation.check_dns_label, webhook_rule, kubeconfig.kubeconfig_problem,
                  charts.check_extra_values) as seen:
        recording = harness.run_program(config)
    # The run declared the platform with those names.
    assert any(r.name.endswith(f"/{SCHEDULER}") for r in recording.registrations)
    assert seen[("check_dns_label", SCHEDULER)] == 1
    assert seen[("webhook_name_is_qualified", WEBHOOK)] == 1
    assert seen[("kubeconfig_problem", None)] == 1
    assert seen[("check_extra_values", "gpuOperator.extraValues")] == 1
    assert seen[("check_extra_values", "monitoring.extraValues")] == 1


def test_a_component_declared_alone_validates_its_args():
    source = f"""
import pulumi_kubernetes as k8s
import pulumi
from components.binpack_scheduler import BinpackScheduler

cluster = k8s.Provider("cluster", context="gpu-cluster")
BinpackScheduler("alone", {{"kubernetes_version": "1.36.4",
                           "scheduler": {{"name": "{SCHEDULER}"}}}},
                 pulumi.ResourceOptions(providers={{"kubernetes": cluster}}))
"""
    with calls_of(validation.check_dns_label) as seen:
        harness.run_program(harness.stack_file_config(with_changes()), source=source)
    assert seen[("check_dns_label", SCHEDULER)] == 1
