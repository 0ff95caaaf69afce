package testenv

// PIDs returns the process IDs of the running kube-apiserver and etcd (0 for
// one that is not running), so that benchmarks can read their CPU and memory
// from /proc beside the process they measure.
func (e *Environment) PIDs() (apiserver, etcd int) {
	if e.apiserver != nil {
		apiserver = e.apiserver.pid()
	}
	if e.etcd != nil {
		etcd = e.etcd.pid()
	}
	return apiserver, etcd
}
