"""The lab: runs of a study, raw export and restore (study, study_record), tables and
statistics (stats), figures (plots), the results page (results_page), the length and
long-document studies (length_study, long_doc_study, long_doc_report, long_doc_task,
bow_baseline) and what training did to a position table (position_table).

Only experiments/ and the tests import this sub-package; the library never does."""
