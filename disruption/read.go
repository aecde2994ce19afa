package disruption

import (
	"fmt"
	"strconv"
)

// readPolicies reads clusterPolicies (status) or nodeDisruptionPolicy
// (spec): files, units and sshkey. special says whether the Special action
// may appear (status only).
func readPolicies(m map[string]any, path string, special bool) (Policies, error) {
	var p Policies
	err := eachItem(m, "files", path, func(item map[string]any, at string) error {
		name, actions, err := readEntry(item, "path", at, special)
		p.Files = append(p.Files, FilePolicy{Path: name, Actions: actions})
		return err
	})
	if err != nil {
		return Policies{}, err
	}
	err = eachItem(m, "units", path, func(item map[string]any, at string) error {
		name, actions, err := readEntry(item, "name", at, special)
		p.Units = append(p.Units, UnitPolicy{Name: name, Actions: actions})
		return err
	})
	if err != nil {
		return Policies{}, err
	}
	ssh, err := walk(m, "sshkey")
	if err != nil {
		return Policies{}, fieldErr(path+".sshkey", "want an object, have %s", kind(m["sshkey"]))
	}
	if ssh != nil {
		p.SSHKey, err = readActions(ssh["actions"], path+".sshkey.actions", special)
	}
	return p, err
}

// eachItem calls fn for every object of the list m[key].
func eachItem(m map[string]any, key, path string, fn func(map[string]any, string) error) error {
	path = join(path, key)
	list, err := listAt(m[key], path)
	if err != nil {
		return err
	}
	for i, v := range list {
		at := path + "[" + strconv.Itoa(i) + "]"
		item, ok := v.(map[string]any)
		if !ok {
			return fieldErr(at, "want an object, have %s", kind(v))
		}
		if err := fn(item, at); err != nil {
			return err
		}
	}
	return nil
}

func listAt(v any, path string) ([]any, error) {
	if v == nil {
		return nil, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fieldErr(path, "want a list, have %s", kind(v))
	}
	return list, nil
}

// readEntry reads a file or unit policy: its key (path or name), which must
// be a non-empty string, and its actions.
func readEntry(item map[string]any, key, path string, special bool) (string, []Action, error) {
	name, err := stringAt(item, key, path)
	if err == nil && name == "" {
		err = fieldErr(join(path, key), "must not be empty")
	}
	if err != nil {
		return "", nil, err
	}
	actions, err := readActions(item["actions"], path+".actions", special)
	return name, actions, err
}

func stringAt(m map[string]any, key, path string) (string, error) {
	v, ok := m[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fieldErr(join(path, key), "want a string, have %s", kind(v))
	}
	return s, nil
}

func readActions(v any, path string, special bool) ([]Action, error) {
	list, err := listAt(v, path)
	if err != nil {
		return nil, err
	}
	actions := make([]Action, 0, len(list))
	for i, v := range list {
		a, err := readAction(v, path+"["+strconv.Itoa(i)+"]", special)
		if err != nil {
			return nil, err
		}
		actions = append(actions, a)
	}
	return actions, nil
}

// readAction reads {type, reload: {serviceName}, restart: {serviceName}}:
// reload is required for Reload and forbidden otherwise, restart likewise,
// as the API's validation has it.
func readAction(v any, path string, special bool) (Action, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return Action{}, fieldErr(path, "want an object, have %s", kind(v))
	}
	t, err := stringAt(m, "type", path)
	if err != nil {
		return Action{}, err
	}
	typ := ActionType(t)
	if allowed, ok := known[typ]; !ok || !(allowed || special) {
		return Action{}, fieldErr(path+".type", "unknown action %q", t)
	}
	reload, err := serviceAt(m, "reload", path, typ == Reload)
	if err != nil {
		return Action{}, err
	}
	restart, err := serviceAt(m, "restart", path, typ == Restart)
	return Action{Type: typ, Unit: reload + restart}, err
}

// serviceAt reads m[key].serviceName, required when want and forbidden
// otherwise.
func serviceAt(m map[string]any, key, path string, want bool) (string, error) {
	svc, err := walk(m, key)
	at := join(path, key)
	switch {
	case err != nil:
		return "", fieldErr(at, "want an object, have %s", kind(m[key]))
	case !want && svc != nil:
		return "", fieldErr(at, "is only allowed when type is %s", capital(key))
	case !want:
		return "", nil
	case svc == nil:
		return "", fieldErr(at, "is required when type is %s", capital(key))
	}
	name, err := stringAt(svc, "serviceName", at)
	if err == nil && name == "" {
		err = fieldErr(at+".serviceName", "must name a systemd unit")
	}
	return name, err
}

func capital(key string) string {
	return fmt.Sprintf("%c%s", key[0]-'a'+'A', key[1:])
}
