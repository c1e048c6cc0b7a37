package filesink

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/minio/minio-go/v7"

	"github.com/kstreamd/kstreamd/checkpoint/s3store"
	"github.com/kstreamd/kstreamd/internal/atomicfile"
)

// Suffixes of the hidden names of in-progress and pending parts.
const (
	inProgressSuffix = ".inprogress"
	pendingSuffix    = ".pending"
)

// ErrLostPart is wrapped by the error of Storage.Publish when neither the
// pending part nor its published file exists: the part's records are lost
// (someone deleted the pending file).
var ErrLostPart = errors.New("filesink: pending part lost")

// Storage is where part files go: a local directory (LocalStorage) or an
// S3-compatible bucket (S3Storage). Keys are '/'-separated and relative to
// the storage's root ("<bucket>/<name>"). Implementations are safe for
// concurrent use; a Part is not.
type Storage interface {
	// NewPart starts the in-progress part that will be published under the
	// key final; Persist makes it pending under PendingKey(final).
	NewPart(ctx context.Context, final string) (Part, error)
	// Publish makes the pending part at pending visible under final, whole
	// at once, and removes pending. It reports already when an earlier
	// Publish did it (pending is gone and final exists). Neither existing
	// is an error wrapping ErrLostPart.
	Publish(ctx context.Context, pending, final string) (already bool, err error)
	// Hidden returns the key of every in-progress and pending part of the
	// storage whose base name starts with "."+prefix+"-", ascending.
	Hidden(ctx context.Context, prefix string) ([]string, error)
	// Delete removes keys; a missing key is no error.
	Delete(ctx context.Context, keys ...string) error
	// String names the storage in messages.
	String() string
}

// Part is an in-progress part file: written sequentially, then made
// pending (Persist) or dropped (Discard). Exactly one of them is called.
type Part interface {
	io.Writer
	// Persist closes the part and makes it durable under its pending key:
	// after it returns, a crash keeps the pending part. It returns the
	// part's size in bytes.
	Persist(ctx context.Context) (int64, error)
	// Discard closes the part and removes what was written.
	Discard() error
}

// PendingKey returns the hidden pending key of the part final:
// "<dir>/.<base>.pending".
func PendingKey(final string) string {
	return path.Join(path.Dir(final), "."+path.Base(final)+pendingSuffix)
}

// inProgressName returns the hidden local in-progress name of final:
// "<dir>/.<base>.inprogress".
func inProgressName(final string) string {
	return path.Join(path.Dir(final), "."+path.Base(final)+inProgressSuffix)
}

// isHidden reports whether key's base name is an in-progress or pending
// part of prefix: ".<prefix>-<run: 8 hex>-<subtask>-<n>...(.inprogress|.pending)",
// so that the parts of prefix "a" and of prefix "a-b" are told apart.
func isHidden(key, prefix string) bool {
	b := path.Base(key)
	rest, ok := strings.CutPrefix(b, "."+prefix+"-")
	if !ok || !strings.HasSuffix(b, inProgressSuffix) && !strings.HasSuffix(b, pendingSuffix) {
		return false
	}
	return hiddenRest.MatchString(rest)
}

// hiddenRest matches what follows ".<prefix>-" in a hidden part's name.
var hiddenRest = regexp.MustCompile(`^[0-9a-f]{8}-[0-9]+-[0-9]+`)

// LocalStorage keeps part files in the directory Root (created when
// missing). A part is written in place as the hidden in-progress file,
// renamed to its hidden pending name at Persist (file and directory
// fsynced) and hard-linked to its final name at Publish (link(2) never
// replaces a file: publishing twice cannot clobber), the pending name then
// removed.
type LocalStorage struct {
	// Root is the output directory.
	Root string
}

var _ Storage = LocalStorage{}

// String implements Storage: "directory <root>".
func (s LocalStorage) String() string { return "directory " + s.Root }

func (s LocalStorage) file(key string) string { return filepath.Join(s.Root, filepath.FromSlash(key)) }

// NewPart implements Storage.
func (s LocalStorage) NewPart(_ context.Context, final string) (Part, error) {
	name := s.file(inProgressName(final))
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return nil, fmt.Errorf("filesink: create part in %s: %w", s, err)
	}
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return nil, fmt.Errorf("filesink: create part in %s: %w", s, err)
	}
	return &localPart{f: f, pending: s.file(PendingKey(final))}, nil
}

type localPart struct {
	f       *os.File
	pending string
	size    int64
}

func (p *localPart) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.size += int64(n)
	return n, err
}

func (p *localPart) Persist(context.Context) (int64, error) {
	name := p.f.Name()
	err := p.f.Sync()
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(name, p.pending)
	}
	if err == nil {
		err = atomicfile.SyncDir(filepath.Dir(p.pending))
	}
	if err != nil {
		return 0, fmt.Errorf("filesink: persist part %s: %w", name, err)
	}
	return p.size, nil
}

func (p *localPart) Discard() error {
	p.f.Close()
	if err := os.Remove(p.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Publish implements Storage: link(pending, final), remove pending, fsync
// the directory. A final name that exists while pending does too is a
// crash between the link and the remove: already.
func (s LocalStorage) Publish(_ context.Context, pending, final string) (bool, error) {
	src, dst := s.file(pending), s.file(final)
	already := false
	if err := os.Link(src, dst); err != nil {
		switch {
		case errors.Is(err, fs.ErrExist):
			already = true
		case errors.Is(err, fs.ErrNotExist):
			if _, serr := os.Stat(dst); serr == nil {
				return true, nil
			}
			return false, fmt.Errorf("%w: %s: neither %s nor %s exists", ErrLostPart, s, pending, final)
		default:
			return false, fmt.Errorf("filesink: publish %s in %s: %w", final, s, err)
		}
	}
	if err := os.Remove(src); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return already, fmt.Errorf("filesink: publish %s in %s: %w", final, s, err)
	}
	if err := atomicfile.SyncDir(filepath.Dir(dst)); err != nil {
		return already, fmt.Errorf("filesink: publish %s in %s: %w", final, s, err)
	}
	return already, nil
}

// Hidden implements Storage.
func (s LocalStorage) Hidden(_ context.Context, prefix string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(s.Root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if d.IsDir() || !isHidden(d.Name(), prefix) {
			return nil
		}
		rel, err := filepath.Rel(s.Root, p)
		if err != nil {
			return err
		}
		out = append(out, filepath.ToSlash(rel))
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("filesink: list %s: %w", s, err)
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements Storage.
func (s LocalStorage) Delete(_ context.Context, keys ...string) error {
	var errs []error
	dirs := map[string]bool{}
	for _, k := range keys {
		if err := os.Remove(s.file(k)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, fmt.Errorf("filesink: delete %s in %s: %w", k, s, err))
		}
		dirs[filepath.Dir(s.file(k))] = true
	}
	for d := range dirs {
		if err := atomicfile.SyncDir(d); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// S3Config locates an S3-compatible bucket (AWS S3, MinIO, Ceph RGW, ...),
// as checkpoint/s3store's Config does for the checkpoint store.
type S3Config struct {
	// Config is the bucket, prefix, endpoint and credentials, as the
	// checkpoint store's (s3store.Config): Endpoint, Bucket and the
	// credentials are required; a Prefix meant as a folder ends with '/'.
	s3store.Config
	// SpoolDir holds the local in-progress files (created when missing).
	// Required.
	SpoolDir string
}

// S3Storage keeps part files in an S3-compatible bucket through minio-go.
// An in-progress part is a local spool file in SpoolDir; Persist uploads it
// to its hidden pending key with one PUT (a reader sees the object whole or
// not at all) and removes the spool file; Publish copies the pending object
// to its final key server-side (CopyObject: the final object appears whole
// at once) and deletes the pending one. Object stores have no rename, so
// this is the closest to Flink's S3 committer without multipart uploads,
// which not every S3 clone lists reliably.
type S3Storage struct {
	cfg S3Config
	cl  *minio.Client
}

var _ Storage = (*S3Storage)(nil)

// NewS3Storage returns the storage of cfg. It does not contact the
// endpoint.
func NewS3Storage(cfg S3Config) (*S3Storage, error) {
	if cfg.SpoolDir == "" {
		return nil, fmt.Errorf("filesink: s3: a spool directory is required")
	}
	cl, err := s3store.NewClient(cfg.Config)
	if err != nil {
		return nil, fmt.Errorf("filesink: s3: %w", err)
	}
	return &S3Storage{cfg: cfg, cl: cl}, nil
}

// String implements Storage: "s3 <bucket>/<prefix> at <endpoint>".
func (s *S3Storage) String() string {
	return "s3 " + s.cfg.Bucket + "/" + s.cfg.Prefix + " at " + s.cfg.Endpoint
}

// NewPart implements Storage: a spool file in SpoolDir.
func (s *S3Storage) NewPart(_ context.Context, final string) (Part, error) {
	if err := os.MkdirAll(s.cfg.SpoolDir, 0o755); err != nil {
		return nil, fmt.Errorf("filesink: create part in %s: %w", s, err)
	}
	// ".<final base>.<random>.inprogress": the part's name, so a listing
	// of the spool tells which run and subtask it belongs to.
	f, err := os.CreateTemp(s.cfg.SpoolDir, "."+path.Base(final)+".*"+inProgressSuffix)
	if err != nil {
		return nil, fmt.Errorf("filesink: create part in %s: %w", s, err)
	}
	return &s3Part{s: s, f: f, key: PendingKey(final)}, nil
}

// CleanSpool removes every spool file of part prefix prefix left in
// SpoolDir by an earlier start (they hold records after the restored
// checkpoint).
func (s *S3Storage) CleanSpool(prefix string) error {
	m, err := filepath.Glob(filepath.Join(s.cfg.SpoolDir, "."+prefix+"-*"+inProgressSuffix))
	if err != nil {
		return err
	}
	var errs []error
	for _, f := range m {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

type s3Part struct {
	s    *S3Storage
	f    *os.File
	key  string
	size int64
}

func (p *s3Part) Write(b []byte) (int, error) {
	n, err := p.f.Write(b)
	p.size += int64(n)
	return n, err
}

func (p *s3Part) Persist(ctx context.Context) (int64, error) {
	defer p.Discard()
	if _, err := p.f.Seek(0, io.SeekStart); err != nil {
		return 0, err
	}
	_, err := p.s.cl.PutObject(ctx, p.s.cfg.Bucket, p.s.cfg.Prefix+p.key, p.f, p.size,
		minio.PutObjectOptions{DisableMultipart: p.size < 1<<30, ContentType: "application/octet-stream"})
	if err != nil {
		return 0, p.s.wrap("upload", p.key, err)
	}
	return p.size, nil
}

func (p *s3Part) Discard() error {
	p.f.Close()
	if err := os.Remove(p.f.Name()); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// wrap maps NoSuchKey to fs.ErrNotExist.
func (s *S3Storage) wrap(op, key string, err error) error {
	if err == nil {
		return nil
	}
	resp := minio.ToErrorResponse(err)
	if resp.Code == minio.NoSuchKey || resp.StatusCode == http.StatusNotFound && resp.Code != minio.NoSuchBucket {
		return fmt.Errorf("filesink: %s %s in %s: %w", op, key, s, fs.ErrNotExist)
	}
	return fmt.Errorf("filesink: %s %s in %s: %w", op, key, s, err)
}

// Publish implements Storage: CopyObject pending to final, then remove
// pending. A missing pending object with final present is already.
func (s *S3Storage) Publish(ctx context.Context, pending, final string) (bool, error) {
	_, err := s.cl.CopyObject(ctx,
		minio.CopyDestOptions{Bucket: s.cfg.Bucket, Object: s.cfg.Prefix + final},
		minio.CopySrcOptions{Bucket: s.cfg.Bucket, Object: s.cfg.Prefix + pending})
	if err = s.wrap("publish", pending, err); err != nil {
		if !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
		if _, serr := s.cl.StatObject(ctx, s.cfg.Bucket, s.cfg.Prefix+final, minio.StatObjectOptions{}); serr == nil {
			return true, nil
		} else if serr = s.wrap("stat", final, serr); !errors.Is(serr, fs.ErrNotExist) {
			return false, serr
		}
		return false, fmt.Errorf("%w: %s: neither %s nor %s exists", ErrLostPart, s, pending, final)
	}
	if err := s.Delete(ctx, pending); err != nil {
		return false, err
	}
	return false, nil
}

// Hidden implements Storage.
func (s *S3Storage) Hidden(ctx context.Context, prefix string) ([]string, error) {
	var out []string
	for obj := range s.cl.ListObjects(ctx, s.cfg.Bucket, minio.ListObjectsOptions{Prefix: s.cfg.Prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, s.wrap("list", s.cfg.Prefix, obj.Err)
		}
		if k, ok := strings.CutPrefix(obj.Key, s.cfg.Prefix); ok && isHidden(k, prefix) {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out, nil
}

// Delete implements Storage (one request per object).
func (s *S3Storage) Delete(ctx context.Context, keys ...string) error {
	var errs []error
	for _, k := range keys {
		if err := s.cl.RemoveObject(ctx, s.cfg.Bucket, s.cfg.Prefix+k, minio.RemoveObjectOptions{}); err != nil {
			if werr := s.wrap("delete", k, err); !errors.Is(werr, fs.ErrNotExist) {
				errs = append(errs, werr)
			}
		}
	}
	return errors.Join(errs...)
}
