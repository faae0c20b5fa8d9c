# Device paths: ways to a GPU other than the GPU resource, refused in a pod that may run on a GPU
# node; and what shows a container GPUs wherever it runs (NVIDIA_VISIBLE_DEVICES, an NVIDIA
# RuntimeClass without a GPU).
package gpuplatform.admission

# Each as [what, the fix]: on a GPU node, each reaches GPUs the pod was not given.
device_paths contains [sprintf("%s %q is privileged", [label, object.get(c, "name", "")]), "run it unprivileged"] if {
	some [label, c] in pod_containers
	c.securityContext.privileged == true
}

# The NVIDIA container toolkit treats a container with CAP_SYS_ADMIN in its bounding set as
# privileged: it then honours NVIDIA_VISIBLE_DEVICES and sees every GPU of the node.
device_paths contains [sprintf("%s %q adds the capability %s, which the NVIDIA container toolkit treats as privileged", [label, object.get(c, "name", ""), capability]), "drop it"] if {
	some [label, c] in pod_containers
	some capability in c.securityContext.capabilities.add
	is_string(capability)
	trim_prefix(upper(capability), "CAP_") in params.privilegedCapabilities
}

device_paths contains [sprintf("volume %q mounts the host path %s, which holds GPU devices or driver files", [object.get(v, "name", ""), v.hostPath.path]), "mount no host devices or driver files"] if {
	is_create
	some v in array_at(pod_spec, "volumes")
	is_string(v.hostPath.path)
	device_host_path(v.hostPath.path)
}

device_paths contains ["spec.hostPID shares the node's processes, and with them their GPU device files", "leave hostPID unset"] if {
	is_create
	pod_spec.hostPID == true
}

# The host's IPC namespace brings the host's /dev/shm, where GPU jobs keep their shared buffers
# (NCCL's shared-memory transport among them).
device_paths contains ["spec.hostIPC shares the node's shared memory, and with it other GPU jobs' buffers", "leave hostIPC unset"] if {
	is_create
	pod_spec.hostIPC == true
}

# The NVIDIA container toolkit gives a container the GPUs its mounts under this directory name
# (`all` among them): decided on the destination as the toolkit cleans it, whatever the source.
device_paths contains [sprintf("%s %q mounts %q at %s, where the NVIDIA container toolkit reads which GPUs to give it", [label, object.get(c, "name", ""), object.get(m, "name", ""), m.mountPath]), "mount it elsewhere"] if {
	some [label, c] in pod_containers
	some m in array_at(c, "volumeMounts")
	is_string(m.mountPath)
	toolkit_device_list(m.mountPath)
}

device_paths contains [sprintf("the annotation %s injects devices into its containers", [key]), "remove the annotation"] if {
	some key in annotations_set
	some prefix in params.deviceAnnotationPrefixes
	startswith(key, prefix)
}

# A path as the kernel reads it: split on "/", without empty segments (repeated and trailing
# slashes) and "." segments; "" for the root. A relative host path or one that climbs with ".."
# is resolved by the node where the policy cannot follow it: those count as device paths.
path_segments(path) := [s | some s in split(path, "/"); not s in {"", "."}]

clean_path(path) := concat("/", ["", concat("/", path_segments(path))])

resolvable(path) if {
	startswith(path, "/")
	not ".." in path_segments(path)
}

# A host path holds GPU devices or driver files when, in any of its spellings on the node
# (params.deviceHostPaths lists each guarded path in all of them), it is one of the guarded
# paths, lies under one, or contains one (a mount of / or /usr holds them all).
device_host_path(path) if not resolvable(path)

device_host_path(path) if {
	resolvable(path)
	clean := clean_path(path)
	some guarded_path in params.deviceHostPaths
	path_within(clean, guarded_path)
}

device_host_path(path) if {
	resolvable(path)
	clean := clean_path(path)
	some guarded_path in params.deviceHostPaths
	path_within(guarded_path, clean)
}

device_host_path(path) if clean_path(path) == "/"

path_within(path, directory) if path == directory

path_within(path, directory) if startswith(path, concat("", [directory, "/"]))

# The toolkit compares the cleaned destination with its directory as a plain string prefix
# (the kubelet makes a relative mount path absolute first); ".." is resolved by the cleaning,
# so a destination that climbs counts when it names the directory at all.
toolkit_device_list(mount_path) if {
	not ".." in path_segments(mount_path)
	startswith(clean_path(mount_path), params.toolkitDeviceListRoot)
}

toolkit_device_list(mount_path) if {
	".." in path_segments(mount_path)
	contains(mount_path, toolkit_device_list_name)
}

toolkit_device_list_name := name if {
	segments := path_segments(params.toolkitDeviceListRoot)
	name := segments[count(segments) - 1]
}

visible_devices_env(c) := e if {
	some e in array_at(c, "env")
	e.name == "NVIDIA_VISIBLE_DEVICES"
	not object.get(e, "value", "x") in {"void", "none"}
}

violations contains {
	"rule": "visible-devices",
	"fixable": false,
	"message": sprintf(
		"pod %q: %s %q sets NVIDIA_VISIBLE_DEVICES, which would expose GPUs it did not request; request GPUs in resources.limits instead",
		[pod_name, label, object.get(c, "name", "")],
	),
} if {
	some [label, c] in pod_containers
	visible_devices_env(c)
}

violations contains {
	"rule": "runtime-class",
	"fixable": false,
	"message": sprintf(
		"pod %q requests no GPU but spec.runtimeClassName is %q, the NVIDIA runtime; request a GPU, or leave runtimeClassName unset",
		[pod_name, pod_spec.runtimeClassName],
	),
} if {
	is_create
	not gpu_pod
	pod_spec.runtimeClassName in params.gpuRuntimeClasses
}

# Device paths: a pod that may run on a GPU node reaches GPUs only through the GPU resource.
# Node agents that need any of these belong in an exempt namespace.
violations contains {
	"rule": "device-path",
	"fixable": false,
	"message": sprintf(
		"pod %q: %s, and it may run on a GPU node (%s), where a GPU is reached only through the GPU resource placed by %s: %s (node agents that need it belong in an exempt namespace)",
		[pod_name, what, gpu_node_way, params.schedulerName, fix],
	),
} if {
	may_run_on_gpu_node
	some [what, fix] in device_paths
}
