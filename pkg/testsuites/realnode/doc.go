// Package realnode is the suite that runs the operator the way its users do:
// on the real one-node cluster of make cluster, installed by its own Helm
// chart from the images of make image, every part real (kubelet, containerd,
// runc, CNI, scheduler, controller-manager, kube-proxy). make e2e brings the
// node up, runs it (build tag realnode) and takes the node down.
package realnode
