"""Experiment studies: the :class:`StudyService` facade and one module per job.

- :mod:`.context`: the ports, the clock and the reads every job shares;
- :mod:`.write`: the one write unit (:func:`.write.write`: transaction, repository,
  authorization) and, on it, the write path of a study (lock, replay, revision
  check, then the job's own rule, then advance, audit and receipt);
- :mod:`.access`: owners and roles; :mod:`.custody`: materials, runs and evidence
  (the host collaborators behind the ports);
- :mod:`.lifecycle`: create, save, open, continue, stop, reconcile;
- :mod:`.trials`: membership; :mod:`.admissions`: execution grants and admission;
- :mod:`.selection`: candidates; :mod:`.reads`: studies, pages, policies, trials.
"""

from benchledger.services.studies.service import StudyService

__all__ = ["StudyService"]
