package broker

// SetBeforePublish runs hook in PublishBatch after the publisher has made sure of the
// batch's queues and before it publishes: the window in which a queue can be deleted,
// or declared again unbound, under a publisher that believes it is there.
func SetBeforePublish(p *Publisher, hook func()) { p.beforePublish = hook }
