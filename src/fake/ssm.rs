//! The fake's parameter store: the CA, token key and root password (`Secrets`), and the record,
//! member configs, fences and marks under the prefix (`PublishedConfig`).

use super::*;

impl Secrets for Fake {
    async fn load_ca(&self) -> Result<Option<Ca>, Error> {
        Ok(self.world().ca.clone())
    }

    async fn create_ca(&self, ca: &Ca) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push("create-ca".into());
        if w.ca.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.ca = Some(ca.clone());
        // Applied, its answer lost.
        split(&mut w, "create-ca")?;
        Ok(Created::Created)
    }

    async fn load_token_key(&self) -> Result<Option<KeyPem>, Error> {
        Ok(self.world().token_key.clone())
    }

    async fn create_token_key(&self, key: &KeyPem) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push("create-token-key".into());
        if w.token_key.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.token_key = Some(key.clone());
        Ok(Created::Created)
    }

    async fn load_root_password(&self) -> Result<Option<Password>, Error> {
        Ok(self.world().root_password.clone())
    }

    async fn put_root_password(&self, password: &Password) -> Result<(), Error> {
        self.world().root_password = Some(password.clone());
        Ok(())
    }

    async fn hand_out(
        &self,
        instance: &str,
        instance_arn: &str,
        bundle: &KeyPem,
        not_after: Timestamp,
    ) -> Result<(), Error> {
        assert_eq!(
            id_of(instance_arn),
            instance,
            "a bundle for its own instance"
        );
        fault(self, "hand-out").await?;
        let mut w = self.world();
        w.calls.push(format!("hand-out {instance}"));
        // As SSM holds them: the end says issuing, the bundle, then its end, each written
        // whatever is there.
        w.issuing.insert(instance.to_string());
        w.cert_not_after.remove(instance);
        w.tls.insert(instance.to_string(), bundle.clone());
        split(&mut w, "hand-out")?;
        w.issuing.remove(instance);
        w.cert_not_after.insert(instance.to_string(), not_after);
        Ok(())
    }
}

impl PublishedConfig for Fake {
    async fn load(&self) -> Result<PublishedState, Error> {
        fault(self, "load").await?;
        let mut w = self.world();
        w.loads += 1;
        Ok(PublishedState {
            decided: w.decided.clone(),
            restored: w.restored.clone(),
            cluster: w.record.clone(),
            members: w.configs.clone(),
            down_since: w.down_since.clone(),
            marked: w.marked.clone(),
            restore_request: w.restore_request.clone(),
            restore_request_at: w.restore_request_at,
            cert_not_after: w.cert_not_after.clone(),
            issuing: w.issuing.clone(),
        })
    }

    async fn create_cluster(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("create-cluster seed {}", record.seed));
        if w.record.is_some() {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(record.clone());
        Ok(Created::Created)
    }

    async fn replace_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("reseed {} -> {}", old.seed, new.seed));
        // As SSM: the fence decides, whoever finds it rolls its record forward.
        let decided = w
            .decided
            .entry(old.fence())
            .or_insert_with(|| Decision::Replaced(Box::new(new.clone())))
            .clone();
        let Decision::Replaced(decided) = decided else {
            return Ok(Created::AlreadyExists);
        };
        split(&mut w, "reseed")?;
        if w.record.as_ref() != Some(old) {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(*decided.clone());
        Ok(if decided.as_ref() == new {
            Created::Created
        } else {
            Created::AlreadyExists
        })
    }

    async fn request_restore(&self, key: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.restore_request = Some(key.to_string());
        w.restore_request_at = Some(w.now);
        Ok(())
    }

    async fn restore_cluster(
        &self,
        old: &ClusterRecord,
        new: &ClusterRecord,
    ) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("restore-cluster seed {}", new.seed));
        let won = !w.restored.contains_key(&old.fence());
        let decided = w
            .restored
            .entry(old.fence())
            .or_insert_with(|| new.clone())
            .clone();
        split(&mut w, "restore")?;
        if w.record.as_ref() != Some(old) {
            return Ok(Created::AlreadyExists);
        }
        w.record = Some(decided);
        Ok(if won {
            Created::Created
        } else {
            Created::AlreadyExists
        })
    }

    async fn mark_served(&self, record: &ClusterRecord) -> Result<Created, Error> {
        let mut w = self.world();
        w.calls.push(format!("mark-served {}", record.seed));
        let decided = w
            .decided
            .entry(record.fence())
            .or_insert(Decision::Served)
            .clone();
        if decided != Decision::Served {
            return Ok(Created::AlreadyExists);
        }
        split(&mut w, "mark-served")?;
        w.record = Some(record.clone());
        Ok(Created::Created)
    }

    async fn note_down(&self, instance: &str, since: Timestamp) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("note-down {instance}"));
        w.down_since.insert(instance.to_string(), since);
        Ok(())
    }

    async fn note_marked(&self, instance: &str, at: Timestamp) -> Result<(), Error> {
        self.world().marked.insert(instance.to_string(), at);
        Ok(())
    }

    async fn forget_down(&self, instance: &str) -> Result<(), Error> {
        let mut w = self.world();
        w.calls.push(format!("forget-down {instance}"));
        w.down_since.remove(instance);
        w.marked.remove(instance);
        Ok(())
    }

    async fn publish(
        &self,
        instance: &str,
        instance_arn: &str,
        config: &MemberConfig,
    ) -> Result<(), Error> {
        assert_eq!(
            id_of(instance_arn),
            instance,
            "a config for its own instance"
        );
        fault(self, "publish").await?;
        let mut w = self.world();
        w.calls.push(format!("publish {instance}"));
        let published_at = w.now;
        w.configs.insert(
            instance.to_string(),
            Published {
                config: config.clone(),
                published_at,
            },
        );
        Ok(())
    }

    async fn unpublish(&self, instance: &str, key_material: bool) -> Result<(), Error> {
        let mut w = self.world();
        if key_material {
            w.calls.push(format!("take-back {instance}"));
            w.tls.remove(instance);
            w.cert_not_after.remove(instance);
            w.issuing.remove(instance);
        }
        w.calls.push(format!("unpublish {instance}"));
        w.configs.remove(instance);
        w.marked.remove(instance);
        Ok(())
    }
}
