// Package e2e drives the reconfd binary as a process: it builds it once,
// serves real configuration files from temporary directories, sends real
// signals and talks to it over real sockets.
//
// The tests need Unix (signals, workers that inherit the listening
// sockets, etcd in a child process: internal/etcdproc), so every test file
// is built only there; elsewhere the package has nothing to test.
package e2e
