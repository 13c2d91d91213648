// Package atomicdir pins the revisions of directories laid out by
// Kubernetes' atomic writer (the kubelet's ConfigMap, Secret, projected and
// downward API volumes):
//
//	config.yaml -> ..data/config.yaml
//	..data -> ..2026_12_05_21_00_00.123456789
//	..2026_12_05_21_00_00.123456789/config.yaml
//
// The kubelet updates such a mount by writing a new timestamped directory,
// pointing a ..data_tmp link at it, renaming ..data_tmp over ..data and
// removing the old directory. A reader that follows config.yaml and then
// secret.key through ..data twice can see one file of each revision. A Pins
// resolves each mount's ..data link once and reads every later file under
// that mount from the same revision directory, so one attempt's files come
// from one revision per mount. A revision that the kubelet removes while
// the attempt still reads makes those reads fail (the file is missing); it
// never makes them read the next revision.
package atomicdir

import (
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// DataLink is the name of the link that names a mount's current revision.
const DataLink = "..data"

// Pins is one attempt's view of the atomic-writer mounts it reads: for each
// mount directory, the revision its ..data link named the first time a
// file under it was read. The zero value is ready to use; a Pins is safe
// for concurrent use.
type Pins struct {
	mu     sync.Mutex
	mounts map[string]string // mount directory -> revision directory name
	plain  map[string]bool   // directories known to hold no ..data link
}

// Seed pins the mounts of revs (mount directory -> revision name), as
// another reader of the same attempt resolved them. A mount already pinned
// keeps its revision.
func (p *Pins) Seed(revs map[string]string) {
	if len(revs) == 0 {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	for dir, rev := range revs {
		if _, ok := p.mounts[dir]; !ok && validRevision(rev) {
			if p.mounts == nil {
				p.mounts = map[string]string{}
			}
			p.mounts[filepath.Clean(dir)] = rev
		}
	}
}

// Revisions returns a copy of the pinned mounts (mount directory ->
// revision name), or nil when no file came from such a mount. Revision
// names are directory names chosen by the writer: not secret.
func (p *Pins) Revisions() map[string]string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.mounts) == 0 {
		return nil
	}
	out := make(map[string]string, len(p.mounts))
	for k, v := range p.mounts {
		out[k] = v
	}
	return out
}

// Resolve returns the path to read for path: under an atomic-writer mount,
// the same file inside the mount's pinned revision directory (pinning it on
// first use); elsewhere path itself. path must be absolute. Only the
// writer's own layout is rewritten: a first component under the mount that
// is ..data, or a link whose target is ..data/<the same name>. Anything else
// (a file the operator placed beside the links, a path already naming a
// revision directory) is read as given.
func (p *Pins) Resolve(path string) string {
	if p == nil || !filepath.IsAbs(path) {
		return path
	}
	path = filepath.Clean(path)
	for dir := filepath.Dir(path); ; dir = filepath.Dir(dir) {
		rev, ok := p.revision(dir)
		if ok {
			rel, err := filepath.Rel(dir, path)
			if err != nil {
				return path
			}
			first, rest, _ := strings.Cut(rel, string(filepath.Separator))
			if first != DataLink {
				target, err := os.Readlink(filepath.Join(dir, first))
				if err != nil || filepath.Clean(target) != filepath.Join(DataLink, first) {
					return path
				}
			}
			if first == DataLink {
				return filepath.Join(dir, rev, rest)
			}
			return filepath.Join(dir, rev, rel)
		}
		if dir == filepath.Dir(dir) {
			return path
		}
	}
}

// revision returns dir's pinned revision, resolving its ..data link on the
// first call for dir.
func (p *Pins) revision(dir string) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if rev, ok := p.mounts[dir]; ok {
		return rev, true
	}
	if p.plain[dir] {
		return "", false
	}
	rev, ok := Current(dir)
	if !ok {
		if p.plain == nil {
			p.plain = map[string]bool{}
		}
		p.plain[dir] = true
		return "", false
	}
	if p.mounts == nil {
		p.mounts = map[string]string{}
	}
	p.mounts[dir] = rev
	return rev, true
}

// Current returns the revision that dir's ..data link names now, and
// whether dir is an atomic-writer mount: ..data is a link to a plain name
// beginning with "..", the writer's timestamped directory.
func Current(dir string) (string, bool) {
	target, err := os.Readlink(filepath.Join(dir, DataLink))
	if err != nil || !validRevision(target) {
		return "", false
	}
	return target, true
}

func validRevision(name string) bool {
	return strings.HasPrefix(name, "..") && len(name) > 2 && name != DataLink &&
		!strings.ContainsRune(name, '/') && !strings.ContainsRune(name, filepath.Separator) &&
		strings.Trim(name, ".") != ""
}
