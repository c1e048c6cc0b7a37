package state

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/cockroachdb/pebble/v2/objstorage/remote"
	"github.com/minio/minio-go/v7"
)

// s3Store is a remote.Storage (Pebble's shared-storage interface) on an
// S3-compatible object store (AWS S3, MinIO, Ceph RGW, ...) through
// minio-go, the client the checkpoint store (checkpoint/s3store) uses:
// object name is the key prefix+name. Every request is retried by the
// client on a transient failure (a network error, 5xx, throttling) with
// exponential back-off and jitter (minio-go's MaxRetry attempts, 10 by
// default, DefaultRetryUnit 200 ms growing to DefaultRetryCap 1 s); an
// error it returns is final and fails the task that met it.
type s3Store struct {
	cl             *minio.Client
	bucket, prefix string
}

var _ remote.Storage = (*s3Store)(nil)

// NewRemoteS3Store returns the remote.Storage of the objects under prefix
// in bucket, reached through cl (checkpoint/s3store.NewClient builds it
// from the store's endpoint, credentials, TLS, region and addressing
// style): RemoteConfig.Store of a disaggregated backend whose tables live
// on S3. It does not contact the store. A prefix meant as a folder ends
// with '/'.
func NewRemoteS3Store(cl *minio.Client, bucket, prefix string) remote.Storage {
	return &s3Store{cl: cl, bucket: bucket, prefix: prefix}
}

// String names the store: "s3 <bucket>/<prefix> at <endpoint>".
func (s *s3Store) String() string {
	return "s3 " + s.bucket + "/" + s.prefix + " at " + s.cl.EndpointURL().Host
}

// wrap makes err say which store, operation and object it concerns.
func (s *s3Store) wrap(op, name string, err error) error {
	return fmt.Errorf("state: remote store %s: %s %s: %w", s, op, name, err)
}

// Close implements remote.Storage.
func (s *s3Store) Close() error { return nil }

// ReadObject implements remote.Storage: the object's size (a HEAD) and a
// reader whose every ReadAt is one ranged GET.
func (s *s3Store) ReadObject(ctx context.Context, name string) (remote.ObjectReader, int64, error) {
	info, err := s.cl.StatObject(ctx, s.bucket, s.prefix+name, minio.StatObjectOptions{})
	if err != nil {
		return nil, 0, s.wrap("read", name, err)
	}
	return &s3Reader{s: s, name: name, size: info.Size}, info.Size, nil
}

type s3Reader struct {
	s    *s3Store
	name string
	size int64
}

func (r *s3Reader) ReadAt(ctx context.Context, p []byte, off int64) error {
	if len(p) == 0 {
		return nil
	}
	if off+int64(len(p)) > r.size {
		return r.s.wrap("read", r.name, io.ErrUnexpectedEOF)
	}
	var opts minio.GetObjectOptions
	if err := opts.SetRange(off, off+int64(len(p))-1); err != nil {
		return r.s.wrap("read", r.name, err)
	}
	obj, err := r.s.cl.GetObject(ctx, r.s.bucket, r.s.prefix+r.name, opts)
	if err != nil {
		return r.s.wrap("read", r.name, err)
	}
	defer obj.Close()
	if _, err := io.ReadFull(obj, p); err != nil {
		return r.s.wrap("read", r.name, err)
	}
	return nil
}

func (r *s3Reader) Close() error { return nil }

// CreateObject implements remote.Storage: the object is buffered in
// memory and written by one PUT on Close (it appears complete; a table is
// at most Pebble's target file size).
func (s *s3Store) CreateObject(name string) (io.WriteCloser, error) {
	return &s3Writer{s: s, name: name}, nil
}

type s3Writer struct {
	s    *s3Store
	name string
	buf  bytes.Buffer
}

func (w *s3Writer) Write(p []byte) (int, error) { return w.buf.Write(p) }

func (w *s3Writer) Close() error {
	_, err := w.s.cl.PutObject(context.Background(), w.s.bucket, w.s.prefix+w.name, bytes.NewReader(w.buf.Bytes()), int64(w.buf.Len()),
		minio.PutObjectOptions{ContentType: "application/octet-stream"})
	if err != nil {
		return w.s.wrap("write", w.name, err)
	}
	return nil
}

// List implements remote.Storage: the names under prefix, prefix cut;
// with a delimiter, the names up to and including the first delimiter
// after prefix are grouped into one.
func (s *s3Store) List(prefix, delimiter string) ([]string, error) {
	if delimiter != "" && delimiter != "/" {
		return nil, fmt.Errorf("state: remote store %s: list with delimiter %q is not supported", s, delimiter)
	}
	var out []string
	for obj := range s.cl.ListObjects(context.Background(), s.bucket, minio.ListObjectsOptions{Prefix: s.prefix + prefix, Recursive: delimiter == ""}) {
		if obj.Err != nil {
			return nil, s.wrap("list", prefix, obj.Err)
		}
		if k, ok := strings.CutPrefix(obj.Key, s.prefix+prefix); ok {
			out = append(out, k)
		}
	}
	return out, nil
}

// Delete implements remote.Storage (S3 answers a delete of a missing key
// with success).
func (s *s3Store) Delete(name string) error {
	if err := s.cl.RemoveObject(context.Background(), s.bucket, s.prefix+name, minio.RemoveObjectOptions{}); err != nil {
		return s.wrap("delete", name, err)
	}
	return nil
}

// Size implements remote.Storage.
func (s *s3Store) Size(name string) (int64, error) {
	info, err := s.cl.StatObject(context.Background(), s.bucket, s.prefix+name, minio.StatObjectOptions{})
	if err != nil {
		return 0, s.wrap("stat", name, err)
	}
	return info.Size, nil
}

// IsNotExistError implements remote.Storage: the store answered that the
// key does not exist.
func (s *s3Store) IsNotExistError(err error) bool {
	var resp minio.ErrorResponse
	if !errors.As(err, &resp) {
		return false
	}
	return resp.Code == minio.NoSuchKey || (resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket)
}
