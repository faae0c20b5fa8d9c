"""GPU faults in `promtool test rules`: each fault of the one classification (base/gpu_faults.py)
fires its alert at its edge; with remediation on, a node out of service is reported with its
fault, a quarantining fault left in service pages (report mode, or beyond the limit) unless
the node's exporter is not scraped, and remediation not running pages."""

from components.base.gpu_faults import FAULTS, QUARANTINE_TAINT
from components.monitoring import rules
from components.platform.config import load_settings
from tests.kit.harness import monitoring_of
from tests.kit.stacks import raw, with_changes
from tests.unit.test_alert_rules import GPU0, GPU0_LABELS, fires, run_promtool_tests
from tests.unit.test_monitoring import SETTINGS

UP = 'up{job="nvidia-dcgm-exporter", node="n1", instance="10.0.0.1:9400"}'


def gpu(metric: str, values: str) -> dict:
    return {"series": f"{metric}{{{GPU0}}}", "values": values}


def exporter(values: str = "1x30") -> dict:
    return {"series": UP, "values": values}


def test_each_fault_fires_its_alert_at_its_edge(promtool_bin, tmp_path):
    """Row remapping failed, uncorrectable ECC errors counted, PCIe replays above 100 in ten
    minutes, NVLink data errors counted: each fires at once with its severity; at the edge
    (no failure, a count that stays, 100 replays) nothing fires."""
    critical, warning = {**GPU0_LABELS, "severity": "critical"}, {**GPU0_LABELS,
                                                                  "severity": "warning"}
    cases = [
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "0x30", "1x30", "GpuRowRemapFailure", critical),
        ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "3x30", "3x10 4x20", "GpuDoubleBitEccErrors",
         critical),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "0+10x30", "0+20x30", "GpuPcieReplays", warning),
        ("DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL", "7x30", "7x10 9x20", "GpuNvlinkErrors",
         warning),
    ]
    tests = []
    for metric, quiet, faulty, alert, labels in cases:
        tests += [{"interval": "1m", "input_series": [gpu(metric, quiet)],
                   "alert_rule_test": [fires(alert, "15m", [])]},
                  {"interval": "1m", "input_series": [gpu(metric, faulty)],
                   "alert_rule_test": [fires(alert, "15m", [labels])]}]
    run_promtool_tests(promtool_bin, tmp_path, tests)


def test_every_fault_has_one_alert_and_says_what_happens_to_its_node():
    alerts = {rule["alert"]: rule for rule in rules.alert_rules(monitoring_of(SETTINGS))}
    for fault in FAULTS:
        description = alerts[fault.alert]["annotations"]["description"]
        assert fault.meaning in description
        assert ("takes the node out of service" in description) == (fault.action == "quarantine")


REMEDIATION = load_settings(raw(with_changes(remediation={"mode": "drain", "maxNodes": 1})))
REPORTING = load_settings(raw(with_changes(remediation={"mode": "report"})))


def quarantined(node: str, fault: str) -> dict:
    return {"series": f'kube_node_spec_taint{{node="{node}", key="{QUARANTINE_TAINT}", '
                      f'value="{fault}", effect="NoSchedule"}}', "values": "1x30"}


def xid(code: int, node: str = "n1") -> dict:
    labels = GPU0.replace('"n1"', f'"{node}"')
    return {"series": f"DCGM_FI_DEV_XID_ERRORS{{{labels}}}", "values": f"{code}x30"}


def test_a_node_out_of_service_is_reported_with_its_fault(promtool_bin, tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [quarantined("n1", "fatal-xid"), xid(79),
                                            exporter()],
         "alert_rule_test": [
             fires("GpuNodeQuarantined", "1m", [{"node": "n1", "value": "fatal-xid",
                                                 "severity": "warning"}]),
             fires("GpuFaultNotQuarantined", "5m", [])]},
    ], settings=REMEDIATION)


def test_a_fault_left_in_service_pages_unless_its_exporter_is_silent(promtool_bin, tmp_path):
    """n2 shows a fatal XID and is not out of service (the limit of one is taken by n1): it
    pages after two minutes. n3's exporter is not scraped: its last XID is no signal."""
    n2 = xid(79, "n2")
    n3 = xid(48, "n3")
    left = {"node": "n2", "fault": "fatal-xid", "severity": "critical"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [
            quarantined("n1", "fatal-xid"), xid(79), exporter(), n2,
            {"series": UP.replace('"n1"', '"n2"'), "values": "1x30"}, n3,
            {"series": UP.replace('"n1"', '"n3"'), "values": "0x30"}],
         "alert_rule_test": [fires("GpuFaultNotQuarantined", "1m", []),
                             fires("GpuFaultNotQuarantined", "3m", [left])]},
    ], settings=REMEDIATION)


def test_report_mode_pages_for_every_fault_it_leaves(promtool_bin, tmp_path):
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [gpu("DCGM_FI_DEV_ROW_REMAP_FAILURE", "1x30"),
                                            exporter()],
         "alert_rule_test": [fires("GpuFaultNotQuarantined", "3m", [
             {"node": "n1", "fault": "row-remap-failure", "severity": "critical"}])]},
    ], settings=REPORTING)


def test_remediation_not_running_pages(promtool_bin, tmp_path):
    available = ('kube_deployment_status_replicas_available{namespace="gpu-remediation", '
                 'deployment="gpu-remediation"}')
    down = {"namespace": "gpu-remediation", "deployment": "gpu-remediation",
            "severity": "critical"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [{"series": available, "values": "1 0x20"}],
         "alert_rule_test": [fires("GpuRemediationUnavailable", "4m", []),
                             fires("GpuRemediationUnavailable", "7m", [down])]},
    ], settings=REMEDIATION)


DRA_REMEDIATION = load_settings(raw(with_changes(
    kubernetesVersion="1.37.2", gpuOperator={"gpuPath": "dra"},
    remediation={"mode": "drain", "maxNodes": 1})))


def test_on_the_dra_path_a_node_whose_failed_gpu_is_out_is_read_from_the_remediation_pod(
        promtool_bin, tmp_path):
    """Its failed device is tainted, not the node: the pod's gauge says the node's GPU is out,
    so the node is reported out, not as a fault left in service."""
    out = {"series": 'gpu_platform_fault_gpus_out_of_service{node="n1", value="fatal-xid", '
                     'namespace="gpu-remediation", pod="gpu-remediation-0"}', "values": "1x30"}
    run_promtool_tests(promtool_bin, tmp_path, [
        {"interval": "1m", "input_series": [out, xid(79), exporter()],
         "alert_rule_test": [
             fires("GpuNodeQuarantined", "1m", [{"node": "n1", "value": "fatal-xid",
                                                 "severity": "warning"}]),
             fires("GpuFaultNotQuarantined", "5m", [])]},
        {"interval": "1m", "input_series": [xid(79), exporter()],
         "alert_rule_test": [fires("GpuFaultNotQuarantined", "3m", [
             {"node": "n1", "fault": "fatal-xid", "severity": "critical"}])]},
    ], settings=DRA_REMEDIATION)
