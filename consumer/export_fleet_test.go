package consumer

// JournalToken is how crash reports name a message id.
var JournalToken = journalToken
