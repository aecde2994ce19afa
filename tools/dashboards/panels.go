package main

// The dashboards as data: one row per panel. A panel's id is its address
// in links (/d/<uid>?viewPanel=<id>, docs/runbooks.md), so ids are never
// reused or renumbered; add new panels with new ids.

// Selectors of the two scrape jobs, named after the ServiceMonitors'
// jobLabel (app.kubernetes.io/name), as in prometheusrule.yaml.
const (
	agent       = `job="nodeward-agent"`
	coordinator = `job="nodeward-coordinator"`
)

// kind is how a panel draws its queries.
type kind string

const (
	timeSeriesKind kind = "timeseries" // values over time
	statKind       kind = "stat"       // the last value, big
	tableKind      kind = "table"      // the current series as rows (instant queries)
)

// query is one PromQL expression of a panel and the legend of its series.
type query struct {
	expr, legend string
}

// panel is one panel of a dashboard.
type panel struct {
	id           uint32
	title, about string
	kind         kind
	unit         string // Grafana's unit id: none, s, bytes, percentunit, short
	width        uint32 // of 24 columns
	queries      []query
}

// board is one dashboard.
type board struct {
	uid, title, about string
	// file is the dashboard's JSON file name under manifests/components/monitoring/dashboards.
	file string
	// nodeValues is the metric whose node label lists $node's values.
	nodeValues string
	// pools: the dashboard has a $pool variable (the coordinator's pools).
	pools  bool
	panels []panel
}

// The dashboards' uids: stable, they are in links.
const (
	rolloutUID = "nodeward-rollout"
	healthUID  = "nodeward-node-health"
)

func boards() []board {
	return []board{rollout(), nodeHealth()}
}

func rollout() board {
	pool := coordinator + `, pool=~"$pool"`
	node := agent + `, node=~"$node"`
	return board{
		uid: rolloutUID, title: "nodeward / Rollout", file: "nodeward-rollout.json", pools: true,
		about:      "OS update rollouts of nodeward's UpdatePools: progress, the unavailable budget, each node's step, drains, gates, grants and rollbacks.",
		nodeValues: "nodeward_update_step{" + agent + "}",
		panels:     append(poolPanels(pool), updatePanels(pool, node)...),
	}
}

// poolPanels are the rollout's panels on the coordinator's pool metrics.
func poolPanels(pool string) []panel {
	return []panel{
		{id: 1, title: "Nodes by state", kind: timeSeriesKind, unit: "none", width: 12,
			about:   "The pool's nodes: total, updated (run the target), updating (hold a slot), degraded (failed on the target).",
			queries: []query{{`nodeward_pool_nodes{` + pool + `}`, "{{pool}} {{state}}"}}},
		{id: 2, title: "Unavailable against maxUnavailable", kind: timeSeriesKind, unit: "none", width: 12,
			about: "Nodes the coordinator counts unavailable, and the most it lets be unavailable at once.",
			queries: []query{
				{`nodeward_pool_unavailable_nodes{` + pool + `}`, "{{pool}} unavailable"},
				{`nodeward_pool_max_unavailable{` + pool + `}`, "{{pool}} maxUnavailable"},
			}},
		{id: 3, title: "Why the rollout waits", kind: tableKind, unit: "none", width: 8,
			about:   "The one reason each pool makes no progress now (none: granting, or nothing to do). NodewardPoolStuck and NodewardPoolHalted fire on it.",
			queries: []query{{`nodeward_pool_waiting{` + pool + `} == 1`, "{{pool}}: {{reason}}"}}},
		{id: 4, title: "Nodes waiting for a slot", kind: timeSeriesKind, unit: "none", width: 8,
			about:   "Nodes that need the target and hold no slot yet.",
			queries: []query{{`nodeward_pool_waiting_nodes{` + pool + `}`, "{{pool}}"}}},
		{id: 5, title: "Nodes holding a slot", kind: tableKind, unit: "none", width: 8,
			about:   "The nodes updating under a grant of the pool now (drain, reboot, return).",
			queries: []query{{`nodeward_node_update_in_progress{` + pool + `}`, "{{pool}} {{node}}"}}},
	}
}

// updatePanels are the rollout's panels on the agents' update and drain
// metrics, and on both programs' scrapes.
func updatePanels(pool, node string) []panel {
	return []panel{
		{id: 6, title: "Update step per node", kind: timeSeriesKind, unit: "none", width: 24,
			about:   "Which node is in which update step (one line per node and step while the node is in it). NodewardNodeDegraded, NodewardDrainBlocked and NodewardNodeUnavailableTooLong fire on it.",
			queries: []query{{`nodeward_update_step{` + node + `} == 1`, "{{node}} {{step}}"}}},
		{id: 7, title: "Pods blocking a drain", kind: timeSeriesKind, unit: "none", width: 12,
			about:   "Pods that block the node's drain now (a PodDisruptionBudget, a refused eviction). NodewardDrainBlocked fires when a drain stays blocked.",
			queries: []query{{`nodeward_drain_blocked_pods{` + node + `}`, "{{node}}"}}},
		{id: 8, title: "Evictions by result", kind: timeSeriesKind, unit: "short", width: 12,
			about: "Eviction requests of the drains by result (evicted, blocked_pdb, …); 0 for a node that evicted nothing.",
			queries: []query{{`sum by (node, result) (increase(nodeward_drain_evictions_total{` + node + `}[$__rate_interval]))` +
				` or sum by (node) (0 * nodeward_drain_blocked_pods{` + node + `})`, "{{node}} {{result}}"}}},
		{id: 9, title: "Health gates passing", kind: timeSeriesKind, unit: "none", width: 8,
			about:   "1 when the pool's health gates passed at their last evaluation, 0 when they hold grants; only pools with gates.",
			queries: []query{{`nodeward_pool_gates_passing{` + pool + `}`, "{{pool}}"}}},
		{id: 10, title: "Slots granted", kind: timeSeriesKind, unit: "short", width: 8,
			about:   "Update slots the coordinator granted.",
			queries: []query{{`sum by (pool) (increase(nodeward_update_grants_total{` + pool + `}[$__rate_interval]))`, "{{pool}}"}}},
		{id: 11, title: "Rollbacks (last hour)", kind: timeSeriesKind, unit: "short", width: 8,
			about:   "OS updates rolled back per node in the last hour: the new OS failed verification. NodewardNodeRolledBack fires on it.",
			queries: []query{{`sum by (node) (increase(nodeward_update_rollbacks_total{` + node + `}[1h]))`, "{{node}}"}}},
		{id: 12, title: "Unavailable time per update", kind: timeSeriesKind, unit: "s", width: 12,
			about:   "Mean seconds from cordon to uncordon of the node's completed updates.",
			queries: []query{{`nodeward_update_unavailable_seconds_sum{` + node + `} / nodeward_update_unavailable_seconds_count{` + node + `} > 0`, "{{node}}"}}},
		{id: 13, title: "Coordinator and agents up", kind: timeSeriesKind, unit: "none", width: 12,
			about: "Scrapes that succeed: 0 for an agent down (a node rebooting under a slot is expected) or no coordinator. NodewardAgentLivenessLost and NodewardCoordinatorDown fire on it.",
			queries: []query{
				{`up{` + coordinator + `}`, "coordinator {{instance}}"},
				{`up{` + node + `}`, "agent {{node}}"},
			}},
	}
}

func nodeHealth() board {
	node := agent + `, node=~"$node"`
	return board{
		uid: healthUID, title: "nodeward / Node health", file: "nodeward-node-health.json",
		about:      "What nodeward's agents see on each node: its conditions, memory pressure, OOM kills, kernel problems, disks, processes, network and the container runtime.",
		nodeValues: "nodeward_node_condition{" + agent + "}",
		panels: []panel{
			{id: 1, title: "Conditions per node", kind: tableKind, unit: "none", width: 12,
				about:   "nodeward's node conditions: 1 where the condition is True (and its taint applied), 0 where it is not. NodewardNodeConditionTrue fires on it.",
				queries: []query{{`max by (node, condition) (nodeward_node_condition{` + node + `, status="True"})`, "{{node}} {{condition}}"}}},
			{id: 2, title: "Conditions true over time", kind: timeSeriesKind, unit: "none", width: 12,
				about:   "How many nodes carry each condition; steps up and down often mean flapping (NodewardConditionFlapping).",
				queries: []query{{`sum by (condition) (nodeward_node_condition{` + node + `, status="True"})`, "{{condition}}"}}},
			{id: 3, title: "Memory pressure (PSI some, 10 s)", kind: timeSeriesKind, unit: "percentunit", width: 12,
				about:   "Share of time some task stalled on memory, the memory probe's input.",
				queries: []query{{`nodeward_pressure_memory_waiting_ratio{` + node + `, kind="some", window="10s"}`, "{{node}}"}}},
			{id: 4, title: "Memory available", kind: timeSeriesKind, unit: "percentunit", width: 12,
				about:   "MemAvailable as a share of MemTotal.",
				queries: []query{{`nodeward_memory_available_bytes{` + node + `} / nodeward_memory_total_bytes{` + node + `}`, "{{node}}"}}},
			{id: 5, title: "OOM kills", kind: timeSeriesKind, unit: "short", width: 12,
				about:   "Containers the kernel's OOM killer ended, per node.",
				queries: []query{{`sum by (node) (increase(nodeward_oom_kills_total{` + node + `}[$__rate_interval]))`, "{{node}}"}}},
			{id: 6, title: "Kernel problems", kind: timeSeriesKind, unit: "short", width: 12,
				about: "Kernel log records the rules matched (a filesystem remounted read-only, a hung task, …) by reason; 0 for a node whose kernel log shows none.",
				queries: []query{{`sum by (node, reason) (increase(nodeward_kernel_problems_total{` + node + `}[$__rate_interval]))` +
					` or sum by (node) (0 * nodeward_kernel_log_records_total{` + node + `})`, "{{node}} {{reason}}"}}},
			{id: 7, title: "Network up", kind: timeSeriesKind, unit: "none", width: 8,
				about:   "1 when a default route leaves through an up link with carrier and a global address.",
				queries: []query{{`nodeward_network_up{` + node + `}`, "{{node}}"}}},
			{id: 8, title: "Container runtime up", kind: timeSeriesKind, unit: "none", width: 8,
				about:   "1 when the container runtime answers CRI Status as ready.",
				queries: []query{{`nodeward_runtime_up{` + node + `}`, "{{node}}"}}},
			{id: 9, title: "Processes of the limit", kind: timeSeriesKind, unit: "percentunit", width: 8,
				about:   "Processes and threads as a share of min(pid_max, threads-max).",
				queries: []query{{`nodeward_processes{` + node + `} / nodeward_processes_limit{` + node + `}`, "{{node}}"}}},
			{id: 10, title: "Filesystem space available", kind: timeSeriesKind, unit: "percentunit", width: 12,
				about:   "Space available to unprivileged users per watched filesystem.",
				queries: []query{{`nodeward_filesystem_avail_bytes{` + node + `} / nodeward_filesystem_size_bytes{` + node + `}`, "{{node}} {{mountpoint}}"}}},
			{id: 11, title: "Probe errors", kind: timeSeriesKind, unit: "short", width: 12,
				about: "Samples whose source could not be read, by probe; 0 for a node whose probes read fine.",
				queries: []query{{`sum by (node, probe) (increase(nodeward_probe_errors_total{` + node + `}[$__rate_interval]))` +
					` or sum by (node) (0 * nodeward_node_condition{` + node + `, status="True"})`, "{{node}} {{probe}}"}}},
			{id: 12, title: "Detection to taint (p90)", kind: timeSeriesKind, unit: "s", width: 12,
				about:   "From the sample that changed a condition to the API write that published it, 90th percentile over the last hour.",
				queries: []query{{`histogram_quantile(0.9, sum by (condition, le) (increase(nodeward_detection_to_write_seconds_bucket{` + node + `}[1h])))`, "{{condition}}"}}},
			{id: 13, title: "Agents up", kind: timeSeriesKind, unit: "none", width: 12,
				about:   "1 while Prometheus scrapes the node's agent. NodewardAgentLivenessLost fires on 0 outside a planned reboot.",
				queries: []query{{`up{` + node + `}`, "{{node}}"}}},
		},
	}
}
