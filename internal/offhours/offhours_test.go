package offhours_test

import (
	"strings"
	"testing"
	"time"

	"github.com/gantryhq/gantry/internal/offhours"
)

func utc(s string) time.Time {
	t, err := time.Parse("2006-01-02 15:04", s)
	if err != nil {
		panic(err)
	}
	return t
}

// TestScheduleWindows: windows by day and time in their zone, across
// midnight and across both daylight-saving changes of Europe/Berlin in
// 2026 (29 March: 02:00 CET → 03:00 CEST; 25 October: 03:00 CEST → 02:00
// CET).
func TestScheduleWindows(t *testing.T) {
	for _, tc := range []struct {
		schedule string
		at       string // UTC
		in       bool
		from     string // UTC, when in
	}{
		// Weekdays 20:00-08:00 Berlin (CET = UTC+1 in winter).
		{"weekdays 20:00-08:00 Europe/Berlin", "2026-12-01 19:00", true, "2026-12-01 19:00"}, // Tue 20:00 CET
		{"weekdays 20:00-08:00 Europe/Berlin", "2026-12-01 18:59", false, ""},                // Tue 19:59
		{"weekdays 20:00-08:00 Europe/Berlin", "2026-12-02 06:59", true, "2026-12-01 19:00"}, // Wed 07:59, from Tue's window
		{"weekdays 20:00-08:00 Europe/Berlin", "2026-12-02 07:00", false, ""},                // Wed 08:00: awake
		{"weekdays 20:00-08:00 Europe/Berlin", "2026-12-05 06:59", true, "2026-12-04 19:00"}, // Sat 07:59: Friday's window runs to Sat 08:00…
		{"weekdays 20:00-08:00 Europe/Berlin", "2026-12-05 07:00", false, ""},                // …and Saturday starts none
		{"weekends 00:00-24:00 UTC", "2026-12-06 23:59", true, "2026-12-06 00:00"},           // Sunday
		{"weekends 00:00-24:00 UTC", "2026-12-07 00:00", false, ""},                          // Monday
		{"mon,wed-thu 12:00-13:00 UTC", "2026-12-03 12:30", true, "2026-12-03 12:00"},        // Thursday
		{"mon,wed-thu 12:00-13:00 UTC", "2026-12-04 12:30", false, ""},                       // Friday
		// Spring forward: the night of 28-29 March is 7 hours (22:00 CET =
		// 21:00 UTC to 06:00 CEST = 04:00 UTC).
		{"daily 22:00-06:00 Europe/Berlin", "2026-03-29 03:59", true, "2026-03-28 21:00"},
		{"daily 22:00-06:00 Europe/Berlin", "2026-03-29 04:00", false, ""},
		// Fall back: the night of 24-25 October is 9 hours (22:00 CEST =
		// 20:00 UTC to 06:00 CET = 05:00 UTC).
		{"daily 22:00-06:00 Europe/Berlin", "2026-10-24 20:00", true, "2026-10-24 20:00"},
		{"daily 22:00-06:00 Europe/Berlin", "2026-10-25 04:59", true, "2026-10-24 20:00"},
		{"daily 22:00-06:00 Europe/Berlin", "2026-10-25 05:00", false, ""},
		// A start in the skipped hour (02:30 on 29 March does not exist)
		// begins when the clocks reach it, at 03:00 CEST = 01:00 UTC.
		{"daily 02:30-04:00 Europe/Berlin", "2026-03-29 00:59", false, ""},
		{"daily 02:30-04:00 Europe/Berlin", "2026-03-29 01:30", true, "2026-03-29 01:30"},
	} {
		s, err := offhours.Parse(tc.schedule)
		if err != nil {
			t.Fatalf("%s: %v", tc.schedule, err)
		}
		in, from, _ := s.Window(utc(tc.at))
		if in != tc.in || in && !from.Equal(utc(tc.from)) {
			t.Errorf("%s at %s UTC: in %v from %v, want %v from %s", tc.schedule, tc.at, in, from.UTC(), tc.in, tc.from)
		}
	}
}

// TestScheduleErrors: a bad schedule says what is wrong.
func TestScheduleErrors(t *testing.T) {
	for in, want := range map[string]string{
		"weekdays 20:00-08:00":                 "want days, a time range and a time zone",
		"workdays 20:00-08:00 UTC":             "days \"workdays\"",
		"daily 25:00-08:00 UTC":                "time range",
		"daily 20:00-20:00 UTC":                "is empty",
		"daily 20:00-08:00 Mars/Olympus_Mons":  "unknown time zone",
		"daily 20:00-08:00 Local":              "unknown time zone",
		"mon-funday 20:00-08:00 Europe/Berlin": "days",
		"daily 24:00-08:00 UTC":                "time range",
	} {
		if _, err := offhours.Parse(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", in, err, want)
		}
	}
}

// FuzzParse: no schedule text panics; one that parses puts every moment it
// calls in a window inside that window, and the window is at most two days.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"weekdays 20:00-08:00 Europe/Berlin", "daily 00:00-24:00 UTC", "mon,wed-fri 12:30-13:00 America/New_York", "sun-sat 23:59-00:00 Asia/Kolkata", "x"} {
		f.Add(s, int64(1790000000))
	}
	f.Fuzz(func(t *testing.T, s string, unix int64) {
		sc, err := offhours.Parse(s)
		if err != nil {
			return
		}
		at := time.Unix(unix%(1<<34), 0)
		in, from, until := sc.Window(at)
		if in && (at.Before(from) || !at.Before(until) || until.Sub(from) > 49*time.Hour) {
			t.Fatalf("%q at %v: window %v to %v", s, at, from, until)
		}
	})
}
