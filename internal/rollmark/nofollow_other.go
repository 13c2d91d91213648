//go:build !unix

package rollmark

// openNoFollow: other systems rely on the Lstat check before the open.
const openNoFollow = 0
