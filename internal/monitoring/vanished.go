package monitoring

import (
	"context"
	"math"
	"time"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
)

// lookback is how far back the engine looks for a series' last sample.
const lookback = 5 * time.Minute

// markVanished writes the stale markers a Prometheus that never stopped
// would have written for the targets that went away while it was down.
//
// A scrape loop marks its target's series stale when the target leaves
// service discovery. A restart loses that: the series of a target gone
// before the first discovery end on their last sample, and the engine
// returns that sample for five more minutes. An etcd member removed
// across a restart would be up{job="etcd"} == 0 for those minutes, and
// etcdInsufficientMembers would count it. So, once a job has scraped each
// of its targets, every series of the job from the last five minutes
// whose instance is no longer a target gets a stale marker now. Jobs with
// honor_labels keep theirs: their series' instance need not be a target's.
func (m *Monitor) markVanished(ctx context.Context) {
	pending := map[string]bool{}
	for _, sc := range m.cfg.ScrapeConfigs {
		if !sc.HonorLabels {
			pending[sc.JobName] = true
		}
	}
	// A job discovery never hands a target group to the scrape manager
	// has no pool to ask; after ten intervals it is left as it is.
	giveUp := time.Now().Add(10 * m.opts.ScrapeInterval)
	tick := time.NewTicker(max(m.opts.ScrapeInterval/4, 50*time.Millisecond))
	defer tick.Stop()
	for len(pending) > 0 && time.Now().Before(giveUp) {
		active := m.scrape.TargetsActive()
		for job := range pending {
			targets, ok := active[job]
			if !ok {
				continue
			}
			instances := map[string]bool{}
			lb := labels.NewBuilder(labels.EmptyLabels())
			scraped := true
			for _, t := range targets {
				scraped = scraped && t.LastScrape().After(m.started)
				instances[t.Labels(lb).Get(model.InstanceLabel)] = true
			}
			if !scraped {
				continue
			}
			delete(pending, job)
			if n, err := m.staleExcept(ctx, job, instances, time.Now()); err != nil {
				m.opts.Logger.Warn("Marking the series of vanished targets stale", "job", job, "err", err)
			} else if n > 0 {
				m.opts.Logger.Info("Marked the series of targets gone since the last run stale", "job", job, "series", n)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// staleExcept appends a stale marker at now to every series of the job
// from the lookback window whose instance is not in keep and whose last
// sample is not one already. It returns how many it marked.
func (m *Monitor) staleExcept(ctx context.Context, job string, keep map[string]bool, now time.Time) (int, error) {
	ts := now.UnixMilli()
	q, err := m.db.Querier(now.Add(-lookback).UnixMilli(), ts)
	if err != nil {
		return 0, err
	}
	defer q.Close()
	set := q.Select(ctx, false, nil, labels.MustNewMatcher(labels.MatchEqual, "job", job))
	var stale []labels.Labels
	var it chunkenc.Iterator
	for set.Next() {
		s := set.At()
		if keep[s.Labels().Get(model.InstanceLabel)] {
			continue
		}
		it = s.Iterator(it)
		last, lastT, found := 0.0, int64(0), false
		for vt := it.Next(); vt != chunkenc.ValNone; vt = it.Next() {
			found = true
			switch vt {
			case chunkenc.ValFloat:
				lastT, last = it.At()
			default:
				// A histogram's last sample is never a float stale marker.
				lastT, last = it.AtT(), 0
			}
		}
		if err := it.Err(); err != nil {
			return 0, err
		}
		if found && lastT < ts && !value.IsStaleNaN(last) {
			stale = append(stale, s.Labels())
		}
	}
	if err := set.Err(); err != nil {
		return 0, err
	}
	if len(stale) == 0 {
		return 0, nil
	}
	app := m.db.AppenderV2(ctx)
	for _, ls := range stale {
		// A target back since the query has a newer sample, and the
		// marker is refused as out of order: the series goes on.
		if _, err := app.Append(0, ls, 0, ts, math.Float64frombits(value.StaleNaN), nil, nil, storage.AOptions{}); err != nil {
			m.opts.Logger.Debug("A stale marker was refused", "series", ls.String(), "err", err)
		}
	}
	return len(stale), app.Commit()
}
