package state

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
)

// ReleaseRemoteMarkers deletes every reference marker on st
// ("<object>.ref.<creator id>.<suffix>") and returns how many it deleted.
// It is for a store only one owner may use at a time, released by that
// owner once it holds the store (a cluster-mode unit's store, right after
// its HEAD claim fenced every earlier owner): the markers left there are
// those of earlier owners' instances, killed, paused (zombies) or on a
// machine that is gone, which can never complete a checkpoint any more.
// Their objects stay while a retained checkpoint refers to them
// (CollectListedRemoteGarbage); a zombie that reads one deleted later
// fails, and was fenced anyway.
func ReleaseRemoteMarkers(st remote.Storage) (int, error) {
	names, err := st.List("", "")
	if err != nil {
		return 0, fmt.Errorf("state: remote store: list: %w", err)
	}
	var markers []string
	for _, n := range names {
		if _, ok := markedObject(n); ok {
			markers = append(markers, n)
		}
	}
	return len(markers), deleteObjects(st, markers)
}

// CollectListedRemoteGarbage is CollectRemoteGarbage over names, a listing
// of st taken earlier: it deletes every listed object no listed marker
// refers to (nor a listed reference list names) and referenced does not
// name, and returns the deleted names,
// sorted. An object created or marked after the listing is never deleted,
// so a caller that lists first, then checks that it still owns the store,
// then collects, deletes nothing a later owner needs.
func CollectListedRemoteGarbage(st remote.Storage, names []string, referenced map[string]bool) ([]string, error) {
	marked := map[string]bool{}
	for _, n := range names {
		if obj, ok := markedObject(n); ok {
			marked[obj] = true
		}
		if isRefList(n) {
			// A reference list (remoteObjects.referenceAll) marks every
			// object it names. One gone since the listing was released
			// with its instance.
			objs, _, err := readRefList(st, n)
			if err != nil {
				return nil, err
			}
			for _, o := range objs {
				marked[o] = true
			}
		}
	}
	var deleted []string
	var errs []error
	for _, n := range names {
		if _, ok := markedObject(n); ok || marked[n] || referenced[n] {
			continue
		}
		if err := st.Delete(n); err != nil && !st.IsNotExistError(err) {
			errs = append(errs, fmt.Errorf("state: remote store: delete %s: %w", n, err))
			continue
		}
		deleted = append(deleted, n)
	}
	sort.Strings(deleted)
	return deleted, errors.Join(errs...)
}

// DownloadRemoteObject copies object name of st into the file dst (made
// complete by a rename): a cluster savepoint copies the objects its units'
// checkpoints refer to into itself, so it is self-contained.
func DownloadRemoteObject(st remote.Storage, name, dst string) error {
	return downloadObject(st, name, dst)
}

// NewRemotePrefixStore returns the store st seen under prefix: object
// name n of the result is prefix+n of st (an S3 key prefix ending in "/",
// e.g. one cluster-mode unit's part of a bucket). Listings are relative
// to the prefix, as remote.Storage's List is.
func NewRemotePrefixStore(st remote.Storage, prefix string) remote.Storage {
	return prefixStore{st: st, prefix: prefix}
}

type prefixStore struct {
	st     remote.Storage
	prefix string
}

func (p prefixStore) String() string { return fmt.Sprint(p.st) + " under " + p.prefix }

func (p prefixStore) Close() error { return nil }

func (p prefixStore) ReadObject(ctx context.Context, name string) (remote.ObjectReader, int64, error) {
	return p.st.ReadObject(ctx, p.prefix+name)
}

func (p prefixStore) CreateObject(name string) (io.WriteCloser, error) {
	return p.st.CreateObject(p.prefix + name)
}

func (p prefixStore) List(prefix, delimiter string) ([]string, error) {
	return p.st.List(p.prefix+prefix, delimiter)
}

func (p prefixStore) Delete(name string) error { return p.st.Delete(p.prefix + name) }

func (p prefixStore) Size(name string) (int64, error) { return p.st.Size(p.prefix + name) }

func (p prefixStore) IsNotExistError(err error) bool { return p.st.IsNotExistError(err) }
