package osupdate

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	rpmostreeclient "github.com/coreos/rpmostree-client-go/pkg/client"
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

// addFixtureSeeds seeds a fuzz target with the real fixtures.
func addFixtureSeeds(f *testing.F) {
	for _, file := range fixtureFiles(f) {
		data, err := os.ReadFile(file)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
}

// parsedFixture reads a fixture and parses it, failing the test if either fails.
func parsedFixture(t testing.TB, f string) ([]byte, *Status) {
	t.Helper()
	data, err := os.ReadFile(f)
	if err != nil {
		t.Fatal(err)
	}
	st, err := ParseStatus(data)
	if err != nil {
		t.Fatalf("%s: %v", f, err)
	}
	return data, st
}

func TestParseStatusRealFixtures(t *testing.T) {
	t.Parallel()
	for _, f := range fixtureFiles(t) {
		_, st := parsedFixture(t, f)
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
		`null`:                 "no \"deployments\"",
		`[]`:                   "decoding",
		`{"deployments":null}`: "no \"deployments\"",
		`{"deployments":{}}`:   "decoding",
		`{"deployments":[1]}`:  "decoding",
		`{"deployments":[{"checksum":1,"booted":true}]}`:                                         "decoding",
		`{"deployments":[{"checksum":"a","booted":"yes"}]}`:                                      "decoding",
		`{"deployments":[{"checksum":"a","booted":true,"staged":1}]}`:                            "decoding",
		`{"deployments":[{"checksum":"a","booted":true,"id":false}]}`:                            "decoding",
		`{"deployments":[{"checksum":"a","booted":true,"base-checksum":1}]}`:                     "decoding",
		`{"deployments":[{"checksum":"a","booted":true,"finalization-locked":1}]}`:               "decoding",
		`{"deployments":[{"checksum":"a","booted":true,"container-image-reference":[]}]}`:        "decoding",
		`{"deployments":[{"checksum":"a","booted":true,"container-image-reference-digest":{}}]}`: "decoding",
		`{"deployments":[{"checksum":"a","booted":true}],"transaction":"rebase"}`:                "decoding",
		`{"deployments":[{"checksum":"a","booted":true}],"transaction":[1]}`:                     "decoding",
	}
	for in, want := range cases {
		if _, err := ParseStatus([]byte(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseStatus(%s) error = %v, want %q", in, err, want)
		}
		if _, _, _, err := libraryParseStatus([]byte(in)); err == nil {
			t.Errorf("ParseStatus(%s) refuses what the library-based parser accepted", in)
		}
	}
	st, err := ParseStatus([]byte(`{"deployments":[{"checksum":"b","staged":true,"finalization-locked":true},{"checksum":"a","booted":true}],"transaction":["rebase","client"]}`))
	if err != nil || !st.FinalizationLocked || !st.TransactionActive {
		t.Errorf("lock and transaction not decoded: %+v, %v", st, err)
	}
}

func FuzzParseStatus(f *testing.F) {
	addFixtureSeeds(f)
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

// libraryParseStatus is ParseStatus as it was on rpmostree-client-go's
// types, kept to compare with: the library's Status, plus a second decode
// of what it lacks, then the same sanity checks.
func libraryParseStatus(data []byte) (*rpmostreeclient.Status, bool, bool, error) {
	var st rpmostreeclient.Status
	if err := json.Unmarshal(data, &st); err != nil {
		return nil, false, false, err
	}
	var raw struct {
		Deployments []struct {
			Staged             bool `json:"staged"`
			FinalizationLocked bool `json:"finalization-locked"`
		} `json:"deployments"`
		Transaction json.RawMessage `json:"transaction"`
	}
	if err := json.Unmarshal(data, &raw); err != nil {
		return nil, false, false, err
	}
	if st.Deployments == nil {
		return nil, false, false, errors.New("no deployments")
	}
	booted, staged := 0, 0
	for _, d := range st.Deployments {
		if d.Checksum == "" || (d.Booted && d.Staged) {
			return nil, false, false, errors.New("bad deployment")
		}
		if d.Booted {
			booted++
		}
		if d.Staged {
			staged++
		}
	}
	if booted != 1 || staged > 1 {
		return nil, false, false, errors.New("bad counts")
	}
	locked := false
	for _, d := range raw.Deployments {
		locked = locked || (d.Staged && d.FinalizationLocked)
	}
	return &st, locked, len(raw.Transaction) > 0 && string(raw.Transaction) != "null", nil
}

// readKeys are the deployment keys nodeward decodes; a type error in any
// other key failed the library's decoding but is ignored now (see
// compareWithLibrary).
var readKeys = []string{"id", "checksum", "base-checksum", "booted", "staged", "finalization-locked",
	"container-image-reference", "container-image-reference-digest"}

// describeDeployment spells what nodeward reads of a deployment, from
// either type.
func describeDeployment(id, checksum string, base *string, baseChecksum string, booted, staged bool, ref, digest string) string {
	b := "<nil>"
	if base != nil {
		b = *base
	}
	return fmt.Sprintf("id=%q checksum=%q base=%q getBase=%q booted=%v staged=%v ref=%q digest=%q",
		id, checksum, b, baseChecksum, booted, staged, ref, digest)
}

func describeOurs(d *Deployment) string {
	if d == nil {
		return "<none>"
	}
	return describeDeployment(d.ID, d.Checksum, d.BaseChecksum, d.GetBaseChecksum(), d.Booted, d.Staged,
		d.ContainerImageReference, d.ContainerImageReferenceDigest)
}

func describeLibrary(d *rpmostreeclient.Deployment) string {
	if d == nil {
		return "<none>"
	}
	return describeDeployment(d.ID, d.Checksum, d.BaseChecksum, d.GetBaseChecksum(), d.Booted, d.Staged,
		d.ContainerImageReference, d.ContainerImageReferenceDigest)
}

// compareWithLibrary fails t when ParseStatus and the library-based parser
// disagree on data: both accept or both refuse, and on acceptance every
// deployment, the booted, staged and rollback ones, the lock and the
// transaction agree.
//
// One deliberate difference: nodeward's Deployment holds only the keys it
// reads (readKeys), so a value of the wrong JSON type under another key
// ("serial":"x", "timestamp":-1, "packages":{}) no longer fails the
// decoding. Nodeward never looks at those values; refusing to update a
// node because one changed type would protect nothing.
func compareWithLibrary(t *testing.T, data []byte) {
	t.Helper()
	got, err := ParseStatus(data)
	want, locked, active, wantErr := libraryParseStatus(data)
	if wantErr != nil && err == nil {
		var te *json.UnmarshalTypeError
		if !errors.As(wantErr, &te) {
			t.Fatalf("ParseStatus(%s) accepts what the library refused: %v", data, wantErr)
		}
		path := strings.Split(te.Field, ".")
		if key := path[len(path)-1]; len(path) < 2 || !strings.EqualFold(path[0], "deployments") || slices.Contains(readKeys, key) {
			t.Fatalf("ParseStatus(%s) accepts what the library refused over a key nodeward reads: %v", data, wantErr)
		}
		return
	}
	if (err == nil) != (wantErr == nil) {
		t.Fatalf("ParseStatus(%s): error %v, library error %v", data, err, wantErr)
	}
	if err != nil {
		return
	}
	if len(got.Deployments) != len(want.Deployments) {
		t.Fatalf("%d deployments, library %d", len(got.Deployments), len(want.Deployments))
	}
	for i := range got.Deployments {
		if g, w := describeOurs(&got.Deployments[i]), describeLibrary(&want.Deployments[i]); g != w {
			t.Errorf("deployment %d: %s\nlibrary: %s", i, g, w)
		}
	}
	wantBooted, _ := want.GetBootedDeployment()
	for _, c := range []struct {
		name      string
		got, want string
	}{
		{"booted", describeOurs(got.Booted()), describeLibrary(wantBooted)},
		{"staged", describeOurs(got.Staged()), describeLibrary(want.GetStagedDeployment())},
		{"rollback", describeOurs(got.Rollback()), describeLibrary(want.GetRollbackDeployment())},
	} {
		if c.got != c.want {
			t.Errorf("%s deployment: %s\nlibrary: %s", c.name, c.got, c.want)
		}
	}
	var wantTx []string
	if want.Transaction != nil {
		wantTx = *want.Transaction
	}
	if got.FinalizationLocked != locked || got.TransactionActive != active || !slices.Equal(got.Transaction, wantTx) {
		t.Errorf("locked=%v active=%v transaction=%q, library locked=%v active=%v transaction=%q",
			got.FinalizationLocked, got.TransactionActive, got.Transaction, locked, active, wantTx)
	}
}

// TestParseStatusAgainstLibrary decodes the library's three real
// fixtures, and variations the fuzzer would take long to build, with both
// parsers.
func TestParseStatusAgainstLibrary(t *testing.T) {
	t.Parallel()
	for _, f := range fixtureFiles(t) {
		data, st := parsedFixture(t, f)
		var lib rpmostreeclient.Status
		if err := json.Unmarshal(data, &lib); err != nil {
			t.Fatal(err)
		}
		if len(st.Deployments) != len(lib.Deployments) || len(st.Deployments) == 0 {
			t.Fatalf("%s: %d deployments, library %d", f, len(st.Deployments), len(lib.Deployments))
		}
		t.Run(filepath.Base(f), func(t *testing.T) { compareWithLibrary(t, data) })
	}
	for _, in := range statusVariations {
		compareWithLibrary(t, []byte(in))
	}
}

// statusVariations: locks, transactions, base checksums, duplicate and
// differently-cased keys, and type errors in keys nodeward reads or not.
var statusVariations = []string{
	`{"deployments":[{"checksum":"b","staged":true,"finalization-locked":true},{"checksum":"a","booted":true},{"checksum":"c"}],"transaction":["rebase","client"]}`,
	`{"deployments":[{"checksum":"b","staged":true,"finalization-locked":false},{"checksum":"a","booted":true,"finalization-locked":true}],"transaction":[]}`,
	`{"deployments":[{"checksum":"a","booted":true,"base-checksum":"z"},{"checksum":"c","base-checksum":null}],"transaction":null}`,
	`{"deployments":[{"checksum":"a","booted":true}],"transaction":["x"],"transaction":null}`,
	`{"DEPLOYMENTS":[{"Checksum":"a","BOOTED":true,"Staged":false,"ID":"x"}],"Transaction":["y"]}`,
	`{"deployments":[{"checksum":"a","booted":true,"checksum":""}]}`,
	`{"deployments":[{"checksum":"a","booted":true,"serial":"x"}]}`,
	`{"deployments":[{"checksum":"a","booted":true,"timestamp":-1,"packages":{}}]}`,
	`{"deployments":[{"checksum":"a","booted":true,"serial":1e10,"checksum":7}]}`,
	`{"deployments":[{"checksum":"a","booted":true,"base-commit-meta":[],"staged":"no"}]}`,
	`{"deployments":[{"checksum":"a","booted":true}],"update-driver":{"driver-name":"zincati"}}`,
}

// FuzzParseStatusAgainstLibrary checks on arbitrary input that ParseStatus
// and the library-based parser agree (compareWithLibrary).
func FuzzParseStatusAgainstLibrary(f *testing.F) {
	addFixtureSeeds(f)
	for _, in := range statusVariations {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, data []byte) { compareWithLibrary(t, data) })
}

// TestParseStatusIgnoresUnreadKeys pins the deliberate difference from the
// library (see compareWithLibrary): a key nodeward does not read may hold
// any JSON value.
func TestParseStatusIgnoresUnreadKeys(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		`{"deployments":[{"checksum":"a","booted":true,"serial":"x"}]}`,
		`{"deployments":[{"checksum":"a","booted":true,"timestamp":-1,"packages":{}}]}`,
	} {
		if _, err := ParseStatus([]byte(in)); err != nil {
			t.Errorf("ParseStatus(%s): %v", in, err)
		}
		if _, _, _, err := libraryParseStatus([]byte(in)); err == nil {
			t.Errorf("the library-based parser accepts %s: the difference is gone, drop this test", in)
		}
	}
}
