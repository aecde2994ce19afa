// Package silence keeps an Alertmanager silence for each node of an
// UpdatePool while its update makes it unavailable, so that planned
// reboots do not page (spec.silences, v1alpha1.Silences).
//
// It speaks Alertmanager's API v2 (POST and GET /api/v2/silences, DELETE
// /api/v2/silence/{id}) through a small client of its own over net/http and
// encoding/json. It does not import github.com/prometheus/alertmanager: that
// module's generated go-openapi client would add megabytes to the one
// nodeward binary, whose agent RSS is a measured target
// (docs/benchmarks.md).
//
// A Keeper holds no state of its own. Alertmanager is the record: the
// keeper finds its silences there by their createdBy ("nodeward-coordinator")
// and their comment, which names the pool and the node
// ("nodeward: pool=<pool> node=<node>: ..."), so a restarted coordinator or
// a new leader adopts the silences the last one made, and never touches a
// silence someone else made or one of another pool.
//
// Each silence lasts Lifetime and Sync extends it once less than
// RenewBefore is left, so Sync must run more often than every RenewBefore
// for a silence to outlast a long update; a coordinator that dies leaves
// silences that end on their own within Lifetime.
package silence

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

const (
	// Lifetime is how long a silence lasts from when it is made or
	// extended.
	Lifetime = time.Hour
	// RenewBefore: Sync extends a silence with less than this left.
	RenewBefore = 15 * time.Minute

	createdBy        = "nodeward-coordinator"
	defaultNodeLabel = "node"
	defaultTimeout   = 5 * time.Second
)

// Keeper makes Alertmanager's silences match the nodes under update.
type Keeper struct {
	client *http.Client
	now    func() time.Time
}

// NewKeeper returns a Keeper that sends its requests through client (nil:
// a client with a 5s timeout) and reads the time from now (nil: time.Now).
func NewKeeper(client *http.Client, now func() time.Time) *Keeper {
	if client == nil {
		client = &http.Client{Timeout: defaultTimeout}
	}
	if now == nil {
		now = time.Now
	}
	return &Keeper{client: client, now: now}
}

// Sync makes the active (or pending) silences nodeward made for pool in
// spec.Alertmanager exactly one per node in nodes: it creates the missing
// ones, expires those of nodes no longer listed and extra ones of a node
// (two after a crash), replaces one whose matchers no longer follow spec,
// and extends any that ends within RenewBefore. It returns the silence IDs
// by node, those of the nodes that failed left out. It goes on past a node
// that fails; the error joins one error per failure, each naming the node,
// the Alertmanager and the HTTP status and body when there was an answer.
// When the silences cannot be listed, Sync fails as a whole and changes
// nothing.
func (k *Keeper) Sync(ctx context.Context, pool string, spec *v1alpha1.Silences, nodes []string) (map[string]string, error) {
	if spec == nil {
		return nil, fmt.Errorf("silences of pool %s: spec.silences is not set", pool)
	}
	if err := Validate(spec); err != nil {
		return nil, fmt.Errorf("silences of pool %s: %w", pool, err)
	}
	if !validName(pool) {
		return nil, fmt.Errorf("silences of pool %q: not a valid pool name", pool)
	}
	c := client{http: k.client, base: strings.TrimRight(spec.Alertmanager, "/")}
	all, err := c.list(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the silences of pool %s in Alertmanager %s: %w", pool, spec.Alertmanager, err)
	}
	mine := map[string][]gettableSilence{}
	for _, s := range all {
		if s.Status.State == stateExpired || s.CreatedBy != createdBy {
			continue
		}
		if p, node, ok := parseComment(s.Comment); ok && p == pool {
			mine[node] = append(mine[node], s)
		}
	}

	now := k.now().UTC()
	ids := map[string]string{}
	listed := map[string]bool{}
	var errs []error
	for _, node := range nodes {
		if listed[node] {
			continue
		}
		listed[node] = true
		id, err := k.keep(ctx, c, pool, spec, node, mine[node], now)
		if id != "" {
			ids[node] = id
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("silence of node %s (pool %s) in Alertmanager %s: %w", node, pool, spec.Alertmanager, err))
		}
	}
	for _, node := range slices.Sorted(maps.Keys(mine)) {
		if listed[node] {
			continue
		}
		for _, s := range mine[node] {
			if err := c.expire(ctx, s.ID); err != nil {
				errs = append(errs, fmt.Errorf("expire silence %s of node %s (pool %s) in Alertmanager %s: %w", s.ID, node, pool, spec.Alertmanager, err))
			}
		}
	}
	return ids, errors.Join(errs...)
}

// keep makes have, the node's silences, one that matches spec and lasts
// more than RenewBefore, and returns its ID; an ID with an error when only
// expiring an extra silence failed.
func (k *Keeper) keep(ctx context.Context, c client, pool string, spec *v1alpha1.Silences, node string, have []gettableSilence, now time.Time) (string, error) {
	if !validName(node) {
		return "", errors.New("not a valid node name")
	}
	want := matchers(spec, node)
	fresh := postableSilence{
		Matchers:  want,
		StartsAt:  now,
		EndsAt:    now.Add(Lifetime),
		CreatedBy: createdBy,
		Comment:   comment(pool, node),
	}
	// The one to keep: matchers as spec wants, then the one lasting longest.
	slices.SortFunc(have, func(a, b gettableSilence) int {
		if sa, sb := sameMatchers(a.Matchers, want), sameMatchers(b.Matchers, want); sa != sb {
			if sa {
				return -1
			}
			return 1
		}
		return cmp.Or(b.EndsAt.Compare(a.EndsAt), strings.Compare(a.ID, b.ID))
	})
	var errs []error
	for _, extra := range have[min(1, len(have)):] {
		if err := c.expire(ctx, extra.ID); err != nil {
			errs = append(errs, fmt.Errorf("expire extra silence %s: %w", extra.ID, err))
		}
	}
	if len(have) == 0 {
		id, err := c.post(ctx, fresh)
		if err != nil {
			return "", errors.Join(append(errs, fmt.Errorf("create: %w", err))...)
		}
		return id, errors.Join(errs...)
	}
	cur := have[0]
	var what string
	update := fresh
	update.ID = cur.ID
	switch {
	case !sameMatchers(cur.Matchers, want):
		// Alertmanager never changes a silence's matchers in place: given
		// the ID it expires that silence and makes a new one, a new ID.
		what = "replace silence " + cur.ID + " (its matchers changed)"
	case cur.EndsAt.Sub(now) < RenewBefore:
		// Same matchers and an active silence's startsAt unchanged (to the
		// second): Alertmanager updates it in place and keeps its ID.
		what = "extend silence " + cur.ID
		update.Matchers, update.StartsAt = cur.Matchers, cur.StartsAt
	default:
		return cur.ID, errors.Join(errs...)
	}
	id, err := c.post(ctx, update)
	var se *statusError
	if errors.As(err, &se) && se.Code == http.StatusNotFound {
		// Collected between the list and the post: make a new one.
		id, err = c.post(ctx, fresh)
	}
	if err != nil {
		return "", errors.Join(append(errs, fmt.Errorf("%s: %w", what, err))...)
	}
	return id, errors.Join(errs...)
}

// matchers are a node's silence's: the node label equal to the node's name
// with or without a :port, then spec's own.
func matchers(spec *v1alpha1.Silences, node string) []matcher {
	label := cmp.Or(spec.NodeLabel, defaultNodeLabel)
	ms := []matcher{{Name: label, Value: regexp.QuoteMeta(node) + "(:[0-9]+)?", IsRegex: true, IsEqual: ptr(true)}}
	for _, m := range spec.Matchers {
		ms = append(ms, matcher{Name: m.Name, Value: m.Value, IsRegex: m.IsRegex, IsEqual: ptr(!m.NotEqual)})
	}
	return ms
}

// sameMatchers compares two lists of matchers as sets.
func sameMatchers(a, b []matcher) bool {
	if len(a) != len(b) {
		return false
	}
	key := func(ms []matcher) []string {
		keys := make([]string, len(ms))
		for i, m := range ms {
			keys[i] = fmt.Sprintf("%q %q %t %t", m.Name, m.Value, m.IsRegex, m.equal())
		}
		slices.Sort(keys)
		return keys
	}
	return slices.Equal(key(a), key(b))
}

func ptr[T any](v T) *T { return &v }

// comment marks a silence as the pool's for the node; parseComment reads
// the mark back.
func comment(pool, node string) string {
	return fmt.Sprintf("nodeward: pool=%s node=%s: planned update, kept while the node updates", pool, node)
}

var commentRE = regexp.MustCompile(`^nodeward: pool=([^\s:]+) node=([^\s:]+):`)

func parseComment(s string) (pool, node string, ok bool) {
	m := commentRE.FindStringSubmatch(s)
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

// validName: a name that the comment can carry and give back (Kubernetes
// names always are).
func validName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return r == ':' || unicode.IsSpace(r) || unicode.IsControl(r)
	})
}
