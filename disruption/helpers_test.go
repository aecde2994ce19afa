package disruption

import (
	"github.com/nodeward/nodeward/machineconfig"
)

// base is a rendered config with a few files, a unit and a key, from which
// each test case derives its new config.
func base() *machineconfig.Config {
	return &machineconfig.Config{
		Name:       "rendered-worker-old",
		OSImageURL: "quay.example/rhcos@sha256:aaaa",
		KernelArgs: []string{"systemd.unified_cgroup_hierarchy=1"},
		Files: []machineconfig.File{
			file("/etc/kubernetes/kubelet.conf", "kind: KubeletConfiguration\n"),
			file("/var/lib/kubelet/config.json", `{"auths":{}}`),
			file("/etc/containers/policy.json", `{"default":[{"type":"insecureAcceptAnything"}]}`),
			file(registriesConf, registriesBase),
		},
		Units:   []machineconfig.Unit{{Name: "kubelet.service", Contents: "[Unit]\n"}},
		SSHKeys: []string{"ssh-ed25519 AAAA core@old"},
	}
}

func file(path, contents string) machineconfig.File {
	return machineconfig.File{Path: path, Mode: 0o644, Contents: []byte(contents)}
}

// edit returns base() changed by fns, named rendered-worker-new.
func edit(fns ...func(*machineconfig.Config)) *machineconfig.Config {
	c := base()
	c.Name = "rendered-worker-new"
	for _, fn := range fns {
		fn(c)
	}
	return c
}

// setFile replaces the file at path, or adds it.
func setFile(path, contents string) func(*machineconfig.Config) {
	return func(c *machineconfig.Config) {
		for i := range c.Files {
			if c.Files[i].Path == path {
				c.Files[i].Contents = []byte(contents)
				return
			}
		}
		c.Files = append(c.Files, file(path, contents))
	}
}

func removeFile(path string) func(*machineconfig.Config) {
	return func(c *machineconfig.Config) {
		for i := range c.Files {
			if c.Files[i].Path == path {
				c.Files = append(c.Files[:i], c.Files[i+1:]...)
				return
			}
		}
	}
}

const registriesBase = `unqualified-search-registries = ["registry.access.example"]
short-name-mode = ""

[[registry]]
  prefix = ""
  location = "quay.example/openshift"

  [[registry.mirror]]
    location = "mirror.internal:5000/openshift"
    pull-from-mirror = "digest-only"
`
