package consumer

// JournalFailing reports whether the attempt journal's last write failed
// (its data dir full or failing: crash.JournalStats.Failing): tasks still
// run, but a crash during one may not be counted, so /readyz fails. A
// failing journal retries a write when asked, at most every few seconds,
// so this turns false once the disk has room even without tasks. Safe
// for concurrent use.
func (s *Server) JournalFailing() bool { return s.journal.Stats().Failing }
