// One piece at a time: only the binpack scheduler, and admission that sends GPU pods to it, on
// a cluster whose GPU node pools taint their nodes. The components reach the cluster through
// the program's Kubernetes provider (here the default one of the stack's kubeconfig).
import * as gpu from "@pulumi/gpu-platform";

// Plain values: they decide which resources exist, so they are known when the program runs.
const schedulerName = "gpu-binpack";
const gpuTaint = { key: "nvidia.com/gpu", value: "present", effect: "NoSchedule" };

const scheduler = new gpu.BinpackScheduler("binpack", {
    kubernetesVersion: "1.36.4",
    scheduler: { name: schedulerName, replicas: 2 },
});

const admission = new gpu.OpaAdmission("admission", {
    schedulerName: schedulerName,
    // Node pools: the GPU nodes' names are not known.
    gpuNodes: { taints: [gpuTaint] },
    trustedNamespaces: ["gpu-operator"],
}, { dependsOn: [scheduler] });

export const webhook = admission.webhookName;
export const certificateExpires = admission.certificateNotAfter;
