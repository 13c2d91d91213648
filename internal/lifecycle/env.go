package lifecycle

import (
	"context"
	"os"
	"slices"
	"strings"

	"github.com/reconfhq/reconf/admin"
	"github.com/reconfhq/reconf/internal/safefile"
)

// The variables a supervisor sets for its workers (WorkerEnv). The
// channel's endpoint travels in the environment rather than on the
// command line, which every local user can read in /proc: today it is a
// private unix socket, and whatever credentials a channel needs later
// travel the same way.
const (
	// envFleetChannel is the embedded etcd's client URL.
	envFleetChannel = "RECONF_FLEET_CHANNEL"
	// envFleetID names the supervisor's fleet in its workers' records and
	// rows.
	envFleetID = "RECONF_FLEET_ID"
	// envFleetBaseline is the file of the in-place baseline the host's
	// workers share (source.WithSharedBaseline).
	envFleetBaseline = "RECONF_FLEET_BASELINE"
	// envFleetRestartFields holds the restart fields the fleet runs on
	// (gateway.RestartFields), which a worker's first generation takes
	// instead of the file's.
	envFleetRestartFields = "RECONF_FLEET_RESTART_FIELDS"
	// envFleetAccept is the file of the table through which the host's
	// workers balance client connections (gateway.WithAcceptShare).
	envFleetAccept = "RECONF_FLEET_ACCEPT"
	// envControl gives a worker the path of its supervisor's control
	// socket, in a directory only the fleet's user can enter.
	envControl = "RECONF_SUPERVISOR_CONTROL"
	// envRestartMark gives a worker the path of the file that exists
	// while its supervisor runs a restart (see restartTracker.mark). A
	// worker without it (its supervisor predates the mark) asks over the
	// socket.
	envRestartMark = "RECONF_SUPERVISOR_RESTART_MARK"
	// envStopMark gives a worker the path of the file that exists once
	// its supervisor stops the whole fleet (Supervisor.signal): a worker
	// then drains as a single process does (WorkerEnv.FleetStopping).
	envStopMark = "RECONF_SUPERVISOR_STOP_MARK"
	// envRestartPublish asks the first new worker of a restart to publish
	// the file's live part once it has joined, so the fleet serves the
	// file's current content before the old workers drain.
	envRestartPublish = "RECONF_RESTART_PUBLISH"
)

// The variables a process sets for the successor it hands over to.
const (
	// envGeneration tells a single process's successor the generation
	// its predecessor served, so that its own numbering continues (its
	// startup load is one more).
	envGeneration = "RECONF_RESTART_GENERATION"
	// envHistory names a file (0600, removed by the predecessor) that
	// holds the history a single process's successor carries on.
	envHistory = "RECONF_RESTART_HISTORY"
	// envHandedOnFD names the descriptor of the hand-over line, on which
	// the successor tells this process whether it handed the listeners
	// on in turn (handoverline.go).
	envHandedOnFD = "RECONF_HANDOVER_LINE_FD"
	// envGoAheadFD names the descriptor of the go-ahead line, on which
	// this process tells the successor it may serve (goahead.go).
	envGoAheadFD = "RECONF_HANDOVER_GO_AHEAD_FD"
	// envSupervisorHandover carries a supervisorHandover (JSON) to the
	// supervisor that replaces this one.
	envSupervisorHandover = "RECONF_SUPERVISOR_HANDOVER"
)

// WorkerEnv is what a supervisor tells each of its workers through the
// environment. The zero value sets nothing.
type WorkerEnv struct {
	// Channel is the embedded etcd's client URLs, comma-separated; empty
	// with an external cluster, which the workers' flags name.
	Channel string
	// Fleet is the fleet's ID.
	Fleet string
	// Baseline and Accept are the files of the host's shared in-place
	// baseline and accept table.
	Baseline, Accept string
	// RestartFields is the encoded gateway.RestartFields the fleet runs
	// on; empty: the file's.
	RestartFields string
	// Control is the path of the supervisor's control socket.
	Control string
	// RestartMark is the path of the supervisor's restart mark.
	RestartMark string
	// StopMark is the path of the supervisor's stop mark.
	StopMark string
	// Publish asks the first new worker of a restart to publish the
	// file's live part.
	Publish bool
}

// workerEnvNames are the variables of WorkerEnv that only a supervisor
// sets: a worker never inherits them from the supervisor's own
// environment. envRestartPublish is not one of them; it is added for the
// first new worker of a restart only.
var workerEnvNames = []string{envFleetChannel, envFleetID, envFleetBaseline, envFleetRestartFields, envFleetAccept,
	envControl, envRestartMark, envStopMark}

// ReadWorkerEnv reads a worker's variables.
func ReadWorkerEnv(lookup func(string) (string, bool)) WorkerEnv {
	get := func(name string) string { v, _ := lookup(name); return v }
	return WorkerEnv{Channel: get(envFleetChannel), Fleet: get(envFleetID), Baseline: get(envFleetBaseline),
		Accept: get(envFleetAccept), RestartFields: get(envFleetRestartFields), Control: get(envControl),
		RestartMark: get(envRestartMark), StopMark: get(envStopMark), Publish: get(envRestartPublish) == "1"}
}

// Environ returns base without the variables only a supervisor sets, then
// e's variables that are set.
func (e WorkerEnv) Environ(base []string) []string {
	out := withoutEnv(base, workerEnvNames...)
	for _, kv := range [][2]string{{envFleetID, e.Fleet}, {envControl, e.Control}, {envRestartMark, e.RestartMark},
		{envStopMark, e.StopMark}, {envFleetBaseline, e.Baseline}, {envFleetAccept, e.Accept}, {envFleetChannel, e.Channel}, {envFleetRestartFields, e.RestartFields}} {
		if kv[1] != "" {
			out = append(out, kv[0]+"="+kv[1])
		}
	}
	if e.Publish {
		out = append(out, envRestartPublish+"=1")
	}
	return out
}

// RestartFieldsName names the variable of RestartFields, for a worker's
// error when it is malformed.
const RestartFieldsName = envFleetRestartFields

// supervisorEnviron is the supervisor's environment for its workers,
// without the management address variable (the supervisor passes the
// address it reserved, or none, as a flag) and without the fleet
// variables, which only a supervisor sets.
func supervisorEnviron() []string {
	return withoutEnv(os.Environ(), append([]string{admin.EnvAddress}, workerEnvNames...)...)
}

// tlsEnv returns management's TLS settings as the environment of a
// supervisor's workers: they serve the management socket, so they read
// the files themselves.
func tlsEnv(t admin.TLSFiles) []string {
	if !t.Enabled() {
		return nil
	}
	return []string{admin.EnvTLSCertFile + "=" + t.CertFile, admin.EnvTLSKeyFile + "=" + t.KeyFile,
		admin.EnvClientCAFile + "=" + t.ClientCAFile, admin.EnvClientAuth + "=" + t.ClientAuth.String()}
}

// withoutEnv returns a copy of env without the entries of the named
// variables.
func withoutEnv(env []string, names ...string) []string {
	return slices.DeleteFunc(slices.Clone(env), func(e string) bool {
		name, _, _ := strings.Cut(e, "=")
		return slices.Contains(names, name)
	})
}

// setEnv returns a copy of env with name set to value, replacing an
// earlier entry.
func setEnv(env []string, name, value string) []string {
	return append(withoutEnv(env, name), name+"="+value)
}

// EnvFleetChannel is the variable that carries a worker's channel URL: the
// command redacts its value from every message it prints, as it does the
// flags'.
const EnvFleetChannel = envFleetChannel

// stopMarkWorkerFailed is the stop mark's content when the supervisor
// stops the fleet during its start-up because a worker could not start.
const stopMarkWorkerFailed = "worker-failed"

// StoppedForAFailedWorker reports whether the worker's supervisor stops
// the fleet during its start-up because another worker could not start
// (the supervisor reports that worker's reason): the SIGTERM this worker
// got is the supervisor's, not an operator's.
func (e WorkerEnv) StoppedForAFailedWorker() bool {
	if e.StopMark == "" {
		return false
	}
	// Bounded, and regular files only: the variable may name a FIFO or a
	// device by mistake, and this runs in the worker's signal path.
	b, err := safefile.ReadFile(context.Background(), e.StopMark, int64(len(stopMarkWorkerFailed)))
	return err == nil && string(b) == stopMarkWorkerFailed
}

// FleetStopping reports whether the worker's supervisor stops the whole
// fleet, not this worker alone (a roll, a replaced supervisor): no other
// process will take the sockets' clients, so the worker drains as a single
// process does. Management keeps answering until the end (a reload is
// 503 canceled), where a drain that moved clients to the others stopped
// accepting at once and left a request waiting in the socket's queue
// with no one to take it. The supervisor writes the mark before it sends
// SIGTERM, so a worker that checks at its signal sees it.
func (e WorkerEnv) FleetStopping() bool {
	if e.StopMark == "" {
		return false
	}
	_, err := os.Lstat(e.StopMark)
	return err == nil
}
