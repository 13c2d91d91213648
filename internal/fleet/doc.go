// Package fleet holds what a runtime and package propagate exchange to
// make a fleet of workers: the channel's record and interfaces, the
// rollback mark a process keeps across a restart, and a runtime's side
// that only a follower or reconfd drives. A library user wires a fleet
// through package propagate and never names these, so they stay out of
// the root's API. Package reconf sets the hooks (Of, WithChannel,
// WithRollbackStore) when it is initialized; this package imports none
// of the module, so the types that mention the root's (a rollout's state,
// an attempt's result) are generic and instantiated by their users.
package fleet
