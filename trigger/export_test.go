package trigger

// HoldPending reports how many SIGHUPs h holds (0 or 1), for tests.
func HoldPending(h *Hold) int { return len(h.sig) }
