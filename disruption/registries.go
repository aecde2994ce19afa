package disruption

import (
	"fmt"
	"reflect"
	"slices"

	"github.com/BurntSushi/toml"
)

// registriesFile is the part of containers/image's sysregistriesv2
// V2RegistriesConf that the daemon's rules read, under the same TOML keys,
// decoded by the TOML library containers/image uses. sysregistriesv2
// itself is not imported: it links docker/reference and go-digest, whose
// initializers cost 386 KiB of heap and 3.1 MiB of RSS at start in a
// minimal binary (measured 2026-11-27), which the agent is kept free of
// (TestReleaseBuildLeavesOutHeavyPackages).
type registriesFile struct {
	UnqualifiedSearchRegistries []string   `toml:"unqualified-search-registries"`
	Registries                  []registry `toml:"registry"`
}

// registry is registry as far as the rules go.
type registry struct {
	Prefix             string     `toml:"prefix"`
	Location           string     `toml:"location"`
	Insecure           bool       `toml:"insecure"`
	Blocked            bool       `toml:"blocked"`
	MirrorByDigestOnly bool       `toml:"mirror-by-digest-only"`
	Mirrors            []endpoint `toml:"mirror"`
}

// endpoint is endpoint as far as the rules go.
type endpoint struct {
	Location       string `toml:"location"`
	Insecure       bool   `toml:"insecure"`
	PullFromMirror string `toml:"pull-from-mirror"`
}

// mirrorByDigestOnly is mirrorByDigestOnly.
const mirrorByDigestOnly = "digest-only"

// SafeRegistriesChange applies the daemon's rules
// (isSafeContainerRegistryConfChanges) to a change of
// /etc/containers/registries.conf from oldTOML to newTOML, either of which
// may be empty for a file that is absent. The change is safe, needing no
// drain, when it only adds: unqualified-search registries appended at the
// end, registries whose mirrors are all pulled by digest only, digest-only
// mirrors of a registry, or a mirror's pull-from-mirror set to digest-only.
// Removing a registry or mirror, changing a registry's prefix, location,
// blocked or insecure, or adding a mirror that may serve tags is unsafe.
// Fields the daemon does not look at (short-name mode, aliases, credential
// helpers, a registry's mirror-by-digest-only on its own) change safely.
// why says which rule decided. err is a file that is not valid TOML.
func SafeRegistriesChange(oldTOML, newTOML []byte) (safe bool, why string, err error) {
	var before, after registriesFile
	if _, err := toml.Decode(string(oldTOML), &before); err != nil {
		return false, "", fmt.Errorf("decoding the old %s: %w", registriesConf, err)
	}
	if _, err := toml.Decode(string(newTOML), &after); err != nil {
		return false, "", fmt.Errorf("decoding the new %s: %w", registriesConf, err)
	}
	if why := searchChange(before.UnqualifiedSearchRegistries, after.UnqualifiedSearchRegistries); why != "" {
		return false, why, nil
	}
	if why := registriesChange(byScope(before.Registries), byScope(after.Registries)); why != "" {
		return false, why, nil
	}
	return true, registriesConf + ": the changes are safe without a drain", nil
}

// searchChange allows only appending to unqualified-search-registries.
func searchChange(before, after []string) string {
	if len(before) > len(after) || !slices.Equal(before, after[:len(before)]) {
		return fmt.Sprintf("%s: unqualified-search-registries changed other than by appending (%v to %v)", registriesConf, before, after)
	}
	return ""
}

// byScope keys registries by prefix, or by location when there is no
// prefix; the last of a scope wins.
func byScope(regs []registry) map[string]registry {
	m := make(map[string]registry, len(regs))
	for _, r := range regs {
		scope := r.Location
		if r.Prefix != "" {
			scope = r.Prefix
		}
		m[scope] = r
	}
	return m
}

// registriesChange returns why the change of registries is unsafe, or "".
// Scopes are visited sorted, so that the reason given is stable.
func registriesChange(before, after map[string]registry) string {
	for _, scope := range sortedKeys(before) {
		if _, ok := after[scope]; !ok {
			return fmt.Sprintf("%s: registry %s has been removed", registriesConf, scope)
		}
	}
	for _, scope := range sortedKeys(after) {
		reg := after[scope]
		prev, ok := before[scope]
		switch {
		case !ok && !allDigestOnly(reg):
			return fmt.Sprintf("%s: registry %s has been added with a mirror that is not pull-from-mirror = \"digest-only\"", registriesConf, scope)
		case ok && !reflect.DeepEqual(prev, reg):
			if why := registryChange(scope, prev, reg); why != "" {
				return why
			}
		}
	}
	return ""
}

func sortedKeys(m map[string]registry) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// registryChange checks one registry present before and after.
func registryChange(scope string, prev, reg registry) string {
	for _, f := range []struct {
		name       string
		old, value any
	}{
		{"prefix", prev.Prefix, reg.Prefix},
		{"location", prev.Location, reg.Location},
		{"blocked", prev.Blocked, reg.Blocked},
		{"insecure", prev.Insecure, reg.Insecure},
	} {
		if f.old != f.value {
			return fmt.Sprintf("%s: %s of registry %s has changed from %v to %v", registriesConf, f.name, scope, f.old, f.value)
		}
	}
	for _, m := range prev.Mirrors {
		if _, ok := findMirror(m.Location, reg.Mirrors); !ok {
			return fmt.Sprintf("%s: mirror %s has been removed from registry %s", registriesConf, m.Location, scope)
		}
	}
	for _, m := range reg.Mirrors {
		if why := mirrorChange(scope, m, prev.Mirrors, reg.MirrorByDigestOnly); why != "" {
			return why
		}
	}
	return ""
}

// mirrorChange checks one mirror of a registry after the change against
// the registry's mirrors before it.
func mirrorChange(scope string, m endpoint, before []endpoint, regDigestOnly bool) string {
	prev, ok := findMirror(m.Location, before)
	digestOnly := m.PullFromMirror == mirrorByDigestOnly
	switch {
	case ok && m.PullFromMirror != prev.PullFromMirror && !digestOnly:
		return fmt.Sprintf("%s: pull-from-mirror of mirror %s in registry %s has changed from %q to %q", registriesConf, m.Location, scope, prev.PullFromMirror, m.PullFromMirror)
	case !ok && !digestOnly && !regDigestOnly:
		return fmt.Sprintf("%s: mirror %s has been added to registry %s with pull-from-mirror %q, not \"digest-only\"", registriesConf, m.Location, scope, m.PullFromMirror)
	}
	return ""
}

// findMirror is the daemon's searchRegistryMirror.
func findMirror(location string, mirrors []endpoint) (endpoint, bool) {
	i := slices.IndexFunc(mirrors, func(m endpoint) bool { return m.Location == location })
	if i < 0 {
		return endpoint{}, false
	}
	return mirrors[i], true
}

// allDigestOnly is the daemon's allDigestOnlyMirror: every mirror pulls by
// digest only; a registry without mirrors counts when it sets
// mirror-by-digest-only.
func allDigestOnly(reg registry) bool {
	if len(reg.Mirrors) == 0 {
		return reg.MirrorByDigestOnly
	}
	return !slices.ContainsFunc(reg.Mirrors, func(m endpoint) bool {
		return m.PullFromMirror != mirrorByDigestOnly
	})
}
