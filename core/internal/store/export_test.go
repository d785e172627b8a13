package store

// BacklogSQL is the backlog query, for the plan check of the external
// tests.
const BacklogSQL = backlogSQL
