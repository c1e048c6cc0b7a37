package sdk

import (
	"testing"

	"github.com/kstreamd/kstreamd/checkpoint"
	"github.com/kstreamd/kstreamd/pipeline"
)

// TestClusterStore: cluster.store picks the store; an s3 store without
// credentials in the environment is refused naming the variables missing.
func TestClusterStore(t *testing.T) {
	s3 := pipeline.ClusterStoreConfig{Kind: pipeline.StoreS3, S3: pipeline.S3StoreConfig{Endpoint: "minio:9000", Bucket: "chk", Prefix: "prod/", Region: "us-east-1"}}
	for _, tc := range []struct {
		name  string
		store pipeline.ClusterStoreConfig
		env   map[string]string
		want  string // the store's String(), or the error
	}{
		{"filesystem", pipeline.ClusterStoreConfig{Kind: pipeline.StoreFilesystem, Dir: "/mnt/chk"}, nil, "filesystem /mnt/chk"},
		{"s3", s3, map[string]string{"AWS_ACCESS_KEY_ID": "k", "AWS_SECRET_ACCESS_KEY": "s"}, "s3 chk/prod/ at minio:9000"},
		{"s3 no credentials", s3, nil, "sdk: cluster.store.kind is s3 but the environment does not set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: the credentials of bucket chk at minio:9000 come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
		{"s3 no secret", s3, map[string]string{"AWS_ACCESS_KEY_ID": "k"}, "sdk: cluster.store.kind is s3 but the environment does not set AWS_SECRET_ACCESS_KEY: the credentials of bucket chk at minio:9000 come from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := &pipeline.Config{Cluster: pipeline.ClusterConfig{Store: tc.store}}
			st, err := clusterStore(cfg, func(k string) string { return tc.env[k] })
			var got string
			if err != nil {
				got = err.Error()
			} else {
				got = st.(checkpoint.Store).String()
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
}
