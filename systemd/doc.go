// Package systemd speaks to the service manager: sd_notify (READY, STATUS,
// WATCHDOG, STOPPING), reboots through logind, and reloads and restarts
// units (and daemon-reload) through systemd's Manager, both over D-Bus.
package systemd
