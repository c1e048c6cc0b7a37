package checkpoint

import (
	"strings"

	"github.com/kstreamd/kstreamd/state"
)

// remoteSharedPrefix starts the shared files of a checkpoint that refer to
// the objects of a disaggregated Pebble backend (state.RemoteConfig):
// "../remote/<object>", relative to the shared directory. Such a file is
// not in the unit's namespace: it is an object of the unit's remote state
// store (Namespace.Remote), referred to, never uploaded or downloaded.
const remoteSharedPrefix = "../" + state.RemoteDirName + "/"

// remoteObject returns the object of the unit's remote state store shared
// file f refers to, and false for a file of the namespace.
func remoteObject(f string) (string, bool) { return strings.CutPrefix(f, remoteSharedPrefix) }

// listRemote lists the unit's remote state store before Retain checks the
// HEAD chain (nil without one): an object created or marked after the
// listing is never collected.
func (o *Owner) listRemote() ([]string, error) {
	if o.ns.Remote == nil {
		return nil, nil
	}
	return o.ns.Remote.List("", "")
}

// collectRemote deletes from the unit's remote state store the listed
// objects no listed marker (a live instance's) and no checkpoint in named
// refers to (state.CollectListedRemoteGarbage).
func (o *Owner) collectRemote(listed []string, referenced map[string]bool) error {
	if o.ns.Remote == nil {
		return nil
	}
	objects := map[string]bool{}
	for f := range referenced {
		if obj, ok := remoteObject(f); ok {
			objects[obj] = true
		}
	}
	_, err := state.CollectListedRemoteGarbage(o.ns.Remote, listed, objects)
	return err
}
