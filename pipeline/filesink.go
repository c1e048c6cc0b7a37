package pipeline

import (
	"fmt"
	"path/filepath"

	"github.com/kstreamd/kstreamd/sink/filesink"
)

// validateFileSinks checks what a file sink's params cannot check alone
// (filesink.Params.CheckParams does the rest): a restore of a file sink
// deletes every in-progress and pending part of its part prefix in its
// output, so two file sinks of the job must not share an output and a
// prefix (one's restore would delete the parts the other's checkpoint is
// to publish), and cluster mode, where each unit restores on its own while
// the others write, is refused.
func (c *Config) validateFileSinks(v *validator) {
	seen := map[string]string{} // output + prefix -> path of the first sink
	for i, s := range c.Sinks {
		if s.Type != filesink.Type {
			continue
		}
		p := fmt.Sprintf("sinks[%d]", i)
		if c.Cluster.Enabled {
			v.errorf(p+".type", "the file sink does not run in cluster mode: each unit's restore would delete the parts the other units are writing")
		}
		fp, ok := c.connParams[s.Name].(*filesink.Params)
		if !ok {
			continue // its params did not decode: reported there
		}
		out := "path " + filepath.Clean(fp.Path)
		if fp.Path == "" {
			out = "s3 " + fp.S3.Endpoint + "/" + fp.S3.Bucket + "/" + fp.S3.Prefix
		}
		prefix := fp.PartPrefix
		if prefix == "" {
			prefix = s.Name
		}
		key := out + " prefix " + prefix
		if first, dup := seen[key]; dup {
			v.errorf(p+".params.part_prefix", "%s writes the same output with the same part prefix %q as %s: a restore of one would delete the other's parts; give each its own part_prefix", s.Name, prefix, first)
			continue
		}
		seen[key] = p
	}
}
