package reasons

import "fmt"

// RolledBackMessage is the message of a reload refused because its source
// holds the content a rollout rolled back (reconf.ReasonRolledBack), where
// generation gen runs the previous content. reapply names the way to
// re-apply it deliberately, which depends on who asked: Runtime.Reapply
// for a library's caller, the management API's reapply query for an HTTP
// client, reconfd reload --reapply for an operator at the command line.
func RolledBackMessage(gen uint64, reapply string) string {
	return fmt.Sprintf("the source holds the content that a rollout rolled back; generation %d runs the previous content. "+
		"Change the source, or re-apply it deliberately (%s)", gen, reapply)
}
