package osupdate

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// fixtureDir is where rpmostree-client-go keeps three real status outputs.
func fixtureFiles(t testing.TB) []string {
	t.Helper()
	files, _ := filepath.Glob("testdata/status/*.json")
	if len(files) != 3 {
		t.Fatalf("want the 3 real status fixtures in testdata/status, found %d", len(files))
	}
	return files
}

func TestParseStatusRealFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range fixtureFiles(t) {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		st, err := ParseStatus(data)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if st.Booted() == nil || st.Booted().Checksum == "" {
			t.Errorf("%s: no booted checksum", f)
		}
		if strings.Contains(f, "fcos-container") {
			s := st.Staged()
			if s == nil || s.ContainerImageReference != "ostree-unverified-registry:quay.io/fedora/fedora-coreos:testing-devel" ||
				!strings.HasPrefix(s.ContainerImageReferenceDigest, "sha256:") {
				t.Errorf("%s: staged image deployment not decoded: %+v", f, s)
			}
			if st.Rollback() != nil {
				t.Errorf("%s: rollback deployment found where there is none", f)
			}
		}
		if st.TransactionActive {
			t.Errorf("%s: transaction reported active", f)
		}
	}
}

func TestParseStatusRejects(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`garbage`:                           "decoding",
		`{}`:                                "no \"deployments\"",
		`{"deployments":[]}`:                "0 booted",
		`{"deployments":[{"booted":true}]}`: "no checksum",
		`{"deployments":[{"checksum":"a","booted":true},{"checksum":"b","booted":true}]}`:                                "2 booted",
		`{"deployments":[{"checksum":"a","booted":true,"staged":true}]}`:                                                 "both booted and staged",
		`{"deployments":[{"checksum":"a","booted":true},{"checksum":"b","staged":true},{"checksum":"c","staged":true}]}`: "2 staged",
	}
	for in, want := range cases {
		if _, err := ParseStatus([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseStatus(%s) error = %v, want %q", in, err, want)
		}
	}
	st, err := ParseStatus([]byte(`{"deployments":[{"checksum":"b","staged":true,"finalization-locked":true},{"checksum":"a","booted":true}],"transaction":["rebase","client"]}`))
	if err != nil || !st.FinalizationLocked || !st.TransactionActive {
		t.Errorf("lock and transaction not decoded: %+v, %v", st, err)
	}
}

func FuzzParseStatus(f *testing.F) {
	for _, file := range fixtureFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		st, err := ParseStatus(data)
		if err != nil {
			return
		}
		// Whatever parses must honour the invariants callers rely on.
		if st.Booted() == nil {
			t.Fatal("parsed status without a booted deployment")
		}
		if s := st.Staged(); s != nil && s.Booted {
			t.Fatal("staged deployment is booted")
		}
		_ = st.Rollback()
		_ = defaultDeployment(st)
	})
}

func BenchmarkParseStatus(b *testing.B) {
	data, err := os.ReadFile("testdata/status/fcos-container-status.json")
	if err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if _, err := ParseStatus(data); err != nil {
			b.Fatal(err)
		}
	}
}
