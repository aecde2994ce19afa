package coordinator

import (
	"fmt"
	"strings"
	"time"

	"github.com/nodeward/nodeward/api/v1alpha1"
)

// inWindow reports whether now falls inside any of windows; no windows
// means always. An invalid window is an error naming it (the CRD schema
// rejects most, but not an unknown time zone on this host).
func inWindow(windows []v1alpha1.MaintenanceWindow, now time.Time) (bool, error) {
	if len(windows) == 0 {
		return true, nil
	}
	for i, w := range windows {
		open, err := windowOpen(w, now)
		if err != nil {
			return false, fmt.Errorf("maintenanceWindows[%d]: %w", i, err)
		}
		if open {
			return true, nil
		}
	}
	return false, nil
}

func windowOpen(w v1alpha1.MaintenanceWindow, now time.Time) (bool, error) {
	loc := time.UTC
	if w.TimeZone != "" {
		var err error
		if loc, err = time.LoadLocation(w.TimeZone); err != nil {
			return false, fmt.Errorf("timeZone %q: %w", w.TimeZone, err)
		}
	}
	start, err := time.Parse("15:04", w.Start)
	if err != nil {
		return false, fmt.Errorf("start %q: want HH:MM", w.Start)
	}
	length, err := time.ParseDuration(w.Duration)
	if err != nil || length <= 0 {
		return false, fmt.Errorf("duration %q: want a positive duration such as 4h", w.Duration)
	}
	local := now.In(loc)
	// A window that opened on an earlier day may still be open: check each
	// opening within the window's length before now.
	for back := 0; back <= int(length/(24*time.Hour))+1; back++ {
		day := local.AddDate(0, 0, -back)
		opens := time.Date(day.Year(), day.Month(), day.Day(), start.Hour(), start.Minute(), 0, 0, loc)
		if !dayAllowed(w.Days, opens.Weekday()) {
			continue
		}
		if !local.Before(opens) && local.Before(opens.Add(length)) {
			return true, nil
		}
	}
	return false, nil
}

func dayAllowed(days []string, d time.Weekday) bool {
	if len(days) == 0 {
		return true
	}
	for _, s := range days {
		if strings.EqualFold(strings.TrimSpace(s), d.String()[:3]) {
			return true
		}
	}
	return false
}
