package machineconfig

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/url"

	ign "github.com/coreos/ignition/v2/config/v3_5/types"
	"github.com/vincent-petithory/dataurl"
)

// maxFileSize bounds a decompressed file: a MachineConfig is an etcd object
// of at most a few MiB, and a gzip bomb in one must not exhaust the agent.
const maxFileSize = 64 << 20

// decodeContents returns a file's bytes from its data URL. nodeward fetches
// nothing: a rendered MachineConfig carries every file inline, and any
// other scheme is refused rather than silently skipped. A file without a
// source is empty, as Ignition creates it.
func decodeContents(field string, res ign.Resource) ([]byte, error) {
	if res.Source == nil {
		return []byte{}, nil
	}
	src := *res.Source
	u, err := url.Parse(src)
	if err != nil || u.Scheme != "data" {
		return nil, fieldErr(field+".source", src, "only data URLs are supported")
	}
	d, err := dataurl.DecodeString(src)
	if err != nil {
		return nil, fieldErr(field+".source", src, "bad data URL: "+err.Error())
	}
	switch c := deref(res.Compression); c {
	case "":
		return d.Data, nil
	case "gzip":
		out, err := gunzip(d.Data)
		if err != nil {
			return nil, fieldErr(field+".compression", c, err.Error())
		}
		return out, nil
	default:
		return nil, fieldErr(field+".compression", c, "unsupported compression, want gzip or none")
	}
}

func gunzip(b []byte) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("decompressing gzip: %w", err)
	}
	defer zr.Close()
	out, err := io.ReadAll(io.LimitReader(zr, maxFileSize+1))
	if err != nil {
		return nil, fmt.Errorf("decompressing gzip: %w", err)
	}
	if len(out) > maxFileSize {
		return nil, fmt.Errorf("decompressed contents exceed %d bytes", maxFileSize)
	}
	return out, nil
}
