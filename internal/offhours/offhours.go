// Package offhours owns off-hours schedules: when a template's workloads
// sleep ("weekdays 20:00-08:00 Europe/Berlin"), parsed once where a template
// is checked, and whether a moment falls in a window, daylight saving
// included.
package offhours

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	_ "time/tzdata" // schedules name IANA zones; a machine without zoneinfo still knows them
)

// Schedule is an off-hours window that repeats on some days, in a time
// zone: "weekdays 20:00-08:00 Europe/Berlin" sleeps from 20:00 on each
// weekday to 08:00 the next morning, Berlin time, daylight saving included.
type Schedule struct {
	text       string
	days       [7]bool // by time.Weekday: the days a window starts
	start, end int     // minutes after midnight; end ≤ start: the next day
	loc        *time.Location
}

func (s Schedule) String() string { return s.text }

var dayNames = map[string]time.Weekday{"sun": time.Sunday, "mon": time.Monday, "tue": time.Tuesday, "wed": time.Wednesday,
	"thu": time.Thursday, "fri": time.Friday, "sat": time.Saturday}

// Parse reads "DAYS HH:MM-HH:MM ZONE". DAYS is daily, weekdays,
// weekends, a day (mon … sun), a range (mon-fri) or a list of those
// (mon,wed,fri-sun); the window starts on those days and ends at the end
// time, the next day when that is not later than the start; 24:00 is the
// end of the day. ZONE is an IANA time zone (Europe/Berlin, UTC).
func Parse(s string) (Schedule, error) {
	f := strings.Fields(s)
	if len(f) != 3 {
		return Schedule{}, fmt.Errorf("%q: want days, a time range and a time zone, such as \"weekdays 20:00-08:00 Europe/Berlin\"", s)
	}
	sc := Schedule{text: s}
	switch f[0] {
	case "daily":
		sc.days = [7]bool{true, true, true, true, true, true, true}
	case "weekdays":
		sc.days = [7]bool{false, true, true, true, true, true, false}
	case "weekends":
		sc.days = [7]bool{true, false, false, false, false, false, true}
	default:
		for _, part := range strings.Split(f[0], ",") {
			from, to, isRange := strings.Cut(part, "-")
			a, okA := dayNames[from]
			b, okB := dayNames[to]
			if !isRange {
				b, okB = a, okA
			}
			if !okA || !okB {
				return Schedule{}, fmt.Errorf("%q: days %q: use daily, weekdays, weekends, or mon … sun, ranges (mon-fri) and lists (mon,wed)", s, f[0])
			}
			for d := a; ; d = (d + 1) % 7 {
				sc.days[d] = true
				if d == b {
					break
				}
			}
		}
	}
	from, to, ok := strings.Cut(f[1], "-")
	start, err1 := clockMinutes(from, false)
	end, err2 := clockMinutes(to, true)
	if !ok || err1 != nil || err2 != nil {
		return Schedule{}, fmt.Errorf("%q: time range %q: want HH:MM-HH:MM such as 20:00-08:00", s, f[1])
	}
	if start == end%(24*60) && end != 24*60 {
		return Schedule{}, fmt.Errorf("%q: the window %s is empty (use 00:00-24:00 for whole days)", s, f[1])
	}
	sc.start, sc.end = start, end
	loc, err := time.LoadLocation(f[2])
	if err != nil || f[2] == "Local" {
		return Schedule{}, fmt.Errorf("%q: unknown time zone %q (use an IANA name such as Europe/Berlin or UTC)", s, f[2])
	}
	sc.loc = loc
	return sc, nil
}

func clockMinutes(s string, end bool) (int, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || len(m) != 2 || err1 != nil || err2 != nil || hh < 0 || mm < 0 || mm > 59 || hh > 24 || hh == 24 && (mm != 0 || !end) {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return hh*60 + mm, nil
}

// Window says whether t falls in an off-hours window, and when that window
// began and ends. Clock times are read in the schedule's zone on the day
// each window starts, so a window across a daylight-saving change is an
// hour shorter or longer in real time; a start in the skipped hour begins
// at the end of the gap.
func (s Schedule) Window(t time.Time) (in bool, from, until time.Time) {
	lt := t.In(s.loc)
	for back := 0; back <= 1; back++ {
		day := time.Date(lt.Year(), lt.Month(), lt.Day()-back, 0, 0, 0, 0, s.loc)
		if !s.days[day.Weekday()] {
			continue
		}
		from = time.Date(day.Year(), day.Month(), day.Day(), 0, s.start, 0, 0, s.loc)
		endDay := day.Day()
		if s.end <= s.start {
			endDay++
		}
		until = time.Date(day.Year(), day.Month(), endDay, 0, s.end, 0, 0, s.loc)
		if !t.Before(from) && t.Before(until) {
			return true, from, until
		}
	}
	return false, time.Time{}, time.Time{}
}
