# Hints: not violations, but a pod that would never run.
package gpuplatform.admission

hints contains {"rule": "gpu-toleration", "message": sprintf(
	"pod %q requests a GPU but does not tolerate the GPU node taint %s, so no node will take it: add the toleration %s",
	[pod_name, taint_text(taint), json.marshal(toleration_for(taint))],
)} if {
	is_create
	gpu_pod
	not kueue_managed
	some taint in params.gpuTaints
	not tolerated(pod_spec, taint)
}
