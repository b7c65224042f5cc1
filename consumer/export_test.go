package consumer

import "time"

// Seams for the package's external tests.

// Resender is settling's view of the broker connection's sender.
type Resender = Sender

// WrapSender replaces s's sender with wrap(its sender); call it before Run.
func WrapSender(s *Server, wrap func(Resender) Resender) { s.sender = wrap(s.sender) }

// The bounds of settling's sends.
const (
	SendTries       = sendTries
	SendBackoff     = sendBackoff
	ForwardReceives = forwardReceives
)

// SetPipeWindow sets the window over which a lone replica measures its
// devices' busy share (pipe.go); call it before Run.
func SetPipeWindow(s *Server, d time.Duration) { s.pipeWindow = d }
