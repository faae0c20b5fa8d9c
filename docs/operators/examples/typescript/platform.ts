// The whole GPU platform from a TypeScript program: the settings a stack file holds, as args.
import * as pulumi from "@pulumi/pulumi";
import * as gpu from "@pulumi/gpu-platform";

const config = new pulumi.Config();

const platform = new gpu.GpuPlatform("gpu-platform", {
    cluster: { context: config.require("kubeContext") },
    kubernetesVersion: "1.36.4",
    gpuNodes: { names: ["gpu-node-1", "gpu-node-2"] },
    scheduler: { replicas: 3 },
    admission: { mode: "mutate" },
    monitoring: { alerts: { gpuTemperatureCelsius: 80 } },
});

export const schedulerName = platform.schedulerName;
export const grafana = platform.grafanaPortForward;
