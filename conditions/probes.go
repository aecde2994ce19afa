package conditions

// Probes builds the enabled probes of cfg, in condition order. Close
// releases what they hold.
func Probes(cfg Config, m *Metrics, netOpts ...NetworkOption) []Probe {
	var out []Probe
	if cfg.Memory.Enabled {
		out = append(out, NewMemoryProbe(cfg.Memory, cfg.ProcRoot, m))
	}
	if cfg.Disk.Enabled {
		out = append(out, NewDiskProbe(cfg.Disk, m))
	}
	if cfg.PIDs.Enabled {
		out = append(out, NewPIDsProbe(cfg.PIDs, cfg.ProcRoot, m))
	}
	if cfg.Network.Enabled {
		out = append(out, NewNetworkProbe(cfg.Network, m, netOpts...))
	}
	if cfg.Runtime.Enabled {
		out = append(out, NewRuntimeProbe(cfg.Runtime, m))
	}
	return out
}

// Close releases the resources of probes that hold any (netlink sockets).
func Close(probes []Probe) {
	for _, p := range probes {
		if c, ok := p.(interface{ Close() }); ok {
			c.Close()
		}
	}
}
