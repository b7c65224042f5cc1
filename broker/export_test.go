package broker

// SetDiskFault makes the data dir of a broker opened with o fail as a full
// or broken disk would: fault is asked before each create, write, fsync
// ("sync") and rename of a data dir file, with the operation and the path,
// and an error it returns (syscall.ENOSPC, say) is that operation's.
func SetDiskFault(o *Options, fault func(op, path string) error) { o.diskFault = fault }
