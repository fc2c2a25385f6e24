package priority

// shares time-slices a card's offline pods under fixed-share: every poll while
// the online pods are idle, each offline pod earns its qgpu-core-greedy G in
// credits; the pod with the most credits, if it has at least 100 (one whole
// poll of the card), runs alone for that poll and pays 100. Over many polls a
// pod runs G% of them, never two at once, and when ΣG < 100 the card idles
// for the rest: fixed-share caps even an offline pod alone on the card.
// Credits are only earned while slicing and capped, so a long preemption does
// not turn into a burst afterwards. Freezes are written before thaws, so two
// offline pods never run at once, even for the length of a poll.
type shares struct {
	credits map[string]int64
}

// maxCredit bounds what a pod can save up (two polls' worth).
const maxCredit = 200

// next returns the pod that runs this poll ("" for none).
func (s *shares) next(pods []string, greedy func(string) int64) string {
	if s.credits == nil {
		s.credits = map[string]int64{}
	}
	alive := map[string]bool{}
	best := ""
	for _, uid := range pods { // sorted: ties go to the lowest UID, deterministically
		alive[uid] = true
		if _, ok := s.credits[uid]; !ok {
			s.credits[uid] = 100 // a new pod is owed its first slice
		}
		s.credits[uid] = min(s.credits[uid]+greedy(uid), maxCredit)
		if s.credits[uid] >= 100 && (best == "" || s.credits[uid] > s.credits[best]) {
			best = uid
		}
	}
	for uid := range s.credits {
		if !alive[uid] {
			delete(s.credits, uid)
		}
	}
	if best != "" {
		s.credits[best] -= 100
	}
	return best
}
