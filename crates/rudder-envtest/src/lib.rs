//! A real kube-apiserver and etcd on loopback for tests (work in progress).
