//! The fake's Auto Scaling: the group as it lists it (`Group`), and its lifecycle hooks, which
//! answer "not pending" on a second completion (`Lifecycle`).

use super::*;

impl Group for Fake {
    async fn list(&self) -> Result<GroupState, Error> {
        fault(self, "list").await?;
        let mut w = self.world();
        w.describes += 1;
        // As Auto Scaling keeps it: the instances not on their way out, unless a test says.
        let desired_capacity = w.desired_capacity.unwrap_or_else(|| {
            w.instances
                .iter()
                .filter(|i| i.state.is_present() && i.state != LifecycleState::TerminatingWait)
                .count() as u32
        });
        Ok(GroupState {
            instances: w.instances.clone(),
            desired_capacity,
            undescribed: Default::default(),
            zones: w.zones.clone(),
            suspended: w.suspended.clone(),
        })
    }

    /// The addresses and launch times were listed with the instances already (the fake has one
    /// source): those EC2 does not describe lose them.
    async fn locate(&self, mut group: GroupState) -> GroupState {
        if fault(self, "locate").await.is_err() {
            return group;
        }
        let undescribed = self.world().faults.undescribed.clone();
        for i in &mut group.instances {
            if let Some(why) = undescribed.get(&i.id) {
                (i.address, i.launched_at) = (None, 0);
                group.undescribed.insert(i.id.clone(), why.clone());
            }
        }
        group
    }

    async fn has_warm_pool(&self) -> Result<bool, Error> {
        Ok(self.world().warm_pool)
    }

    async fn set_unhealthy(&self, instance: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("set-unhealthy {instance}"));
        if let Some(i) = w.instances.iter_mut().find(|i| i.id == instance) {
            i.healthy = false;
        }
        Ok(())
    }
}

impl Lifecycle for Fake {
    async fn complete(
        &self,
        instance: &str,
        transition: Transition,
        result: ActionResult,
    ) -> Result<Completion, Error> {
        fault(self, "complete").await?;
        let mut w = self.world();
        w.calls.push(format!(
            "complete {transition} {instance} {}",
            result.as_str()
        ));
        let Some(pos) = w.instances.iter().position(|i| i.id == instance) else {
            return Ok(Completion::NotPending);
        };
        if w.stale_completions {
            return Ok(Completion::NotPending);
        }
        match (transition, &w.instances[pos].state, result) {
            (Transition::Launch, LifecycleState::PendingWait, ActionResult::Continue) => {
                w.instances[pos].state = LifecycleState::InService;
            }
            (Transition::Launch, LifecycleState::PendingWait, ActionResult::Abandon)
            | (Transition::Terminate, LifecycleState::TerminatingWait, _) => {
                w.instances.remove(pos);
            }
            _ => return Ok(Completion::NotPending),
        }
        Ok(Completion::Done)
    }

    async fn heartbeat(&self, instance: &str, transition: Transition) -> Result<Completion, Error> {
        fault(self, "heartbeat").await?;
        let mut w = self.world();
        if w.faults.heartbeat_fails.contains(instance) {
            w.calls
                .push(format!("heartbeat {transition} {instance} failed"));
            return Err(Error::Aws {
                operation: "RecordLifecycleActionHeartbeat",
                source: "Throttling: Rate exceeded".into(),
            });
        }
        w.calls.push(format!("heartbeat {transition} {instance}"));
        let held = w.instances.iter().any(|i| {
            i.id == instance
                && matches!(
                    (transition, &i.state),
                    (Transition::Launch, LifecycleState::PendingWait)
                        | (Transition::Terminate, LifecycleState::TerminatingWait)
                )
        });
        if !held {
            return Ok(Completion::NotPending);
        }
        let now = w.now;
        w.faults.beats.push((instance.to_string(), now));
        Ok(Completion::Done)
    }

    async fn hooks(&self) -> Result<Vec<Hook>, Error> {
        fault(self, "hooks").await?;
        let w_timeout = self
            .world()
            .faults
            .hook_timeout
            .unwrap_or(std::time::Duration::from_secs(300));
        let names = self
            .world()
            .hooks
            .clone()
            .unwrap_or_else(|| vec!["etcd-launch".into(), "etcd-terminate".into()]);
        Ok(names
            .into_iter()
            .map(|name| Hook {
                name,
                heartbeat_timeout: w_timeout,
            })
            .collect())
    }
}
