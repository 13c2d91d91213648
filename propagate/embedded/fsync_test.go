package embedded

import "testing"

func TestNoFsyncByDefault(t *testing.T) {
	s := &Server{cfg: Config{}}
	if c := s.configLocked(); !c.UnsafeNoFsync {
		t.Error("the default member fsyncs")
	}
	s.cfg.Fsync = true
	if c := s.configLocked(); c.UnsafeNoFsync {
		t.Error("Fsync: true does not fsync")
	}
}
